"""The ``QCLUSTER`` settings dict: each setting declared once, here (its default, what it is for,
the rule a value must meet and the check id naming a bad one).

Read through ``cluster_settings.NAME``; the object reloads on Django's ``setting_changed``
signal so ``override_settings(QCLUSTER=...)`` works in tests. Nothing is written onto
``django.conf.settings``. ``manage.py check`` runs ``cluster_settings.check()``
(:mod:`qcluster.checks`); the machinery is :mod:`qcluster.appsettings`.
"""

from typing import Any

from qcluster.appsettings import AppSettings, Setting, at_least, is_int

#: The longest version a node reports (the ``version`` column of ``cluster_node``).
VERSION_MAX_LENGTH = 100

SETTINGS: tuple[Setting, ...] = (
    Setting(
        "APP_VERSION",
        None,
        "Overrides the version reported by each node (else QQQ_APP_VERSION, else the package "
        "version).",
        must=f"None or a non-empty string of at most {VERSION_MAX_LENGTH} characters",
        valid=lambda v: (
            v is None or (isinstance(v, str) and bool(v.strip()) and len(v) <= VERSION_MAX_LENGTH)
        ),
        error="qcluster.E002",
    ),
    Setting(
        "WIDGET_REFRESH_SECONDS",
        15,
        "How often the admin's nodes widget refreshes itself.",
        # A browser's setTimeout runs at once past 2**31 ms: the widget would never pause.
        must="an integer from 1 to 86400 (a day)",
        valid=lambda v: is_int(v) and 1 <= v <= 86400,
        error="qcluster.E003",
    ),
    Setting(
        "DRAIN_GRACE_SECONDS",
        30,
        "How long a draining node waits for its running tasks before it stops.",
        must="a number of seconds >= 0",
        valid=at_least(0),
        error="qcluster.E004",
    ),
    Setting(
        "LEASE_SAFETY_SECONDS",
        2,
        "A lease holder stops acting this long before its lease expires.",
        must="a number of seconds >= 0",
        valid=at_least(0),
        error="qcluster.E005",
    ),
)

cluster_settings = AppSettings(
    "QCLUSTER", "qcluster", SETTINGS, not_a_dict="qcluster.E001", unknown_key="qcluster.W001"
)

#: Each setting's default, by name.
DEFAULTS: dict[str, Any] = cluster_settings.defaults
