"""The settings machinery of an app's settings dict (``QCLUSTER``, and qprint's ``QPRINT``).

Each setting is declared once, as a :class:`Setting`: its default, what it is for, and the rule
a value must meet with the check id that names a bad one. An :class:`AppSettings` made from
those declarations is read as ``app_settings.NAME`` (the user's value or the default; reloaded on
Django's ``setting_changed`` signal, so ``override_settings`` works in tests; nothing is written
onto ``django.conf.settings``), and its :meth:`AppSettings.check` is the app's system check: the
dict itself, unknown keys, then each setting's rule, in the order they are declared.

A generic piece with no setting of its own: qcluster keeps it so that qprint, which runs on
qcluster's nodes, builds ``QPRINT`` on the same class (qcluster never imports qprint).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from numbers import Real
from typing import Any

from django.conf import settings
from django.core import checks
from django.core.signals import setting_changed

#: More checks of a valid value: ``more(app_settings, value)`` returns their messages.
More = Callable[["AppSettings", Any], list[checks.CheckMessage]]


@dataclass(frozen=True)
class Setting:
    """One setting: ``valid(value)`` says whether a value meets the rule ``must`` (words that
    complete "must be ..."); a value that does not is the error ``error`` (with ``hint``)."""

    name: str
    default: Any
    doc: str
    must: str = ""
    valid: Callable[[Any], bool] | None = None
    error: str = ""
    hint: str = ""
    more: More | None = None


# -- rules shared by the apps -------------------------------------------------------------------


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    return isinstance(value, Real) and not isinstance(value, bool)


def positive_int(value: Any) -> bool:
    return is_int(value) and value > 0


def positive_number(value: Any) -> bool:
    return is_number(value) and value > 0


def at_least(minimum: float) -> Callable[[Any], bool]:
    return lambda value: is_number(value) and value >= minimum


class AppSettings:
    """The settings dict ``setting`` (e.g. ``"QPRINT"``) of the app ``app``."""

    def __init__(
        self,
        setting: str,
        app: str,
        declared: Iterable[Setting],
        *,
        not_a_dict: str,
        unknown_key: str,
    ) -> None:
        self.setting = setting
        self.app = app
        self.declared: dict[str, Setting] = {s.name: s for s in declared}
        self.defaults: dict[str, Any] = {s.name: s.default for s in self.declared.values()}
        self.not_a_dict = not_a_dict
        self.unknown_key = unknown_key
        self._cache: dict[str, Any] = {}
        setting_changed.connect(self._reload, weak=False)

    @property
    def user_settings(self) -> dict[str, Any]:
        user = getattr(settings, self.setting, None)
        return user if isinstance(user, dict) else {}

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or name not in self.defaults:
            raise AttributeError(f"Unknown {self.setting} setting: {name!r}")
        if name not in self._cache:
            self._cache[name] = self.user_settings.get(name, self.defaults[name])
        return self._cache[name]

    def reload(self) -> None:
        self._cache.clear()

    def _reload(self, *, setting: str, **kwargs: Any) -> None:
        if setting == self.setting:
            self.reload()

    def label(self, name: str) -> str:
        """``QPRINT['NAME']``, as the messages name a setting."""
        return f"{self.setting}[{name!r}]"

    def refusal(self, name: str, value: Any) -> checks.Error | None:
        """The check's error for ``value`` of the setting ``name`` when it breaks the setting's
        rule; None when it keeps it (or the setting has none). :meth:`check` and code that reads a
        setting before any check runs (a node's start) refuse a value in the same words."""
        declared = self.declared[name]
        if declared.valid is None or declared.valid(value):
            return None
        return checks.Error(
            f"{self.label(name)} must be {declared.must}, got {value!r}.",
            hint=declared.hint or None,
            id=declared.error,
        )

    def check(self) -> list[checks.CheckMessage]:
        """Every problem of the user's settings dict, as system check messages."""
        user = getattr(settings, self.setting, None)
        if user is None:
            user = {}
        if not isinstance(user, dict):
            return [
                checks.Error(
                    f"{self.setting} must be a dict, not {type(user).__name__}.",
                    id=self.not_a_dict,
                )
            ]
        messages: list[checks.CheckMessage] = [
            checks.Warning(
                f"{self.label(key)} is not a {self.app} setting; it is ignored.",
                hint=f"Known settings: {', '.join(sorted(self.defaults))}.",
                id=self.unknown_key,
            )
            for key in sorted(set(user) - set(self.defaults))
        ]
        for declared in self.declared.values():
            value = user.get(declared.name, declared.default)
            refused = self.refusal(declared.name, value)
            if refused is not None:
                messages.append(refused)
            elif declared.more is not None:
                messages.extend(declared.more(self, value))
        return messages
