"""The ``QCLUSTER`` settings dict: its defaults live here and nowhere else.

Read through ``cluster_settings.NAME``; the object reloads on Django's ``setting_changed``
signal so ``override_settings(QCLUSTER=...)`` works in tests. Nothing is written onto
``django.conf.settings``.
"""

from typing import Any

from django.conf import settings
from django.core.signals import setting_changed

DEFAULTS: dict[str, Any] = {
    # Overrides the version reported by each node (else QQQ_APP_VERSION, else the package version).
    "APP_VERSION": None,
    # How often the admin's nodes widget refreshes itself.
    "WIDGET_REFRESH_SECONDS": 15,
    # How long a draining node waits for its running tasks before it stops.
    "DRAIN_GRACE_SECONDS": 30,
    # A lease holder stops acting this long before its lease expires.
    "LEASE_SAFETY_SECONDS": 2,
}


class ClusterSettings:
    def __init__(self) -> None:
        self._cache: dict[str, Any] = {}

    @property
    def user_settings(self) -> dict[str, Any]:
        return getattr(settings, "QCLUSTER", None) or {}

    def __getattr__(self, name: str) -> Any:
        if name not in DEFAULTS:
            raise AttributeError(f"Unknown QCLUSTER setting: {name!r}")
        if name not in self._cache:
            self._cache[name] = self.user_settings.get(name, DEFAULTS[name])
        return self._cache[name]

    def reload(self) -> None:
        self._cache.clear()


cluster_settings = ClusterSettings()


def _reload(*, setting: str, **kwargs: Any) -> None:
    if setting == "QCLUSTER":
        cluster_settings.reload()


setting_changed.connect(_reload)
