"""System checks for the ``QCLUSTER`` settings (ids ``qcluster.E0xx`` / ``qcluster.W0xx``)."""
