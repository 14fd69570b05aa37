"""System checks for the ``QCLUSTER`` settings (ids ``qcluster.E0xx`` / ``qcluster.W0xx``).

- E001 ``QCLUSTER`` is not a dict
- E002 ``APP_VERSION`` is neither None nor a non-empty string
- E003 ``WIDGET_REFRESH_SECONDS`` is not an integer >= 1
- E004 ``DRAIN_GRACE_SECONDS`` is not a number >= 0
- E005 ``LEASE_SAFETY_SECONDS`` is not a number >= 0
- W001 an unknown key in ``QCLUSTER`` (a typo keeps the default silently)
"""

from numbers import Real

from django.conf import settings
from django.core.checks import Error, Tags, Warning, register

from qcluster.conf import DEFAULTS


def _is_number(value, minimum: float) -> bool:
    return isinstance(value, Real) and not isinstance(value, bool) and value >= minimum


@register(Tags.compatibility)
def check_qcluster_settings(app_configs=None, **kwargs) -> list:
    user = getattr(settings, "QCLUSTER", None)
    if user is None:
        user = {}
    if not isinstance(user, dict):
        return [
            Error(
                f"QCLUSTER must be a dict, got {type(user).__name__}.",
                id="qcluster.E001",
            )
        ]
    problems = []
    value = user.get("APP_VERSION")
    if value is not None and not (isinstance(value, str) and value.strip()):
        problems.append(
            Error(
                f"QCLUSTER['APP_VERSION'] must be None or a non-empty string, got {value!r}.",
                id="qcluster.E002",
            )
        )
    value = user.get("WIDGET_REFRESH_SECONDS", DEFAULTS["WIDGET_REFRESH_SECONDS"])
    if not (isinstance(value, int) and _is_number(value, 1)):
        problems.append(
            Error(
                f"QCLUSTER['WIDGET_REFRESH_SECONDS'] must be an integer >= 1, got {value!r}.",
                id="qcluster.E003",
            )
        )
    for key, check_id in (("DRAIN_GRACE_SECONDS", "E004"), ("LEASE_SAFETY_SECONDS", "E005")):
        value = user.get(key, DEFAULTS[key])
        if not _is_number(value, 0):
            problems.append(
                Error(
                    f"QCLUSTER[{key!r}] must be a number of seconds >= 0, got {value!r}.",
                    id=f"qcluster.{check_id}",
                )
            )
    for key in sorted(set(user) - set(DEFAULTS)):
        problems.append(
            Warning(
                f"Unknown QCLUSTER setting {key!r}; it is ignored.",
                hint=f"Known settings: {', '.join(sorted(DEFAULTS))}.",
                id="qcluster.W001",
            )
        )
    return problems
