"""System checks for the ``QCLUSTER`` settings (ids ``qcluster.E0xx`` / ``qcluster.W0xx``).

- E001 ``QCLUSTER`` is not a dict
- E002 ``APP_VERSION`` is neither None nor a non-empty string of at most 100 characters
- E003 ``WIDGET_REFRESH_SECONDS`` is not an integer from 1 to 86400
- E004 ``DRAIN_GRACE_SECONDS`` is not a number >= 0
- E005 ``LEASE_SAFETY_SECONDS`` is not a number >= 0
- W001 an unknown key in ``QCLUSTER`` (a typo keeps the default silently)
"""

from django.core.checks import Tags, register

from qcluster.conf import cluster_settings


@register(Tags.compatibility)
def check_qcluster_settings(app_configs=None, **kwargs) -> list:
    """Each declared setting's rule (:mod:`qcluster.conf`), the dict itself and unknown keys."""
    return cluster_settings.check()
