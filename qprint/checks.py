"""System checks for the ``QPRINT`` settings (ids ``qprint.E0xx`` / ``qprint.W0xx``)."""
