"""The runtime settings stored in ``cluster_setting``: their defaults and their rules.

They live in the database, not in ``settings.py``, so an operator can change them for the whole
cluster at once (from the admin) and every node picks the change up on its next heartbeat.

Rules (checked on every save, by the model and so by the admin form): integers are > 0 and at
most a bound (``heartbeat_seconds`` an hour, ``lost_after_seconds`` a week,
``retain_stopped_days`` ten years), ``lost_after_seconds`` >= 2 x ``heartbeat_seconds`` (a node
must miss at least two heartbeats before it is declared lost), booleans are ``true``/``false``.

This module is pure: it never reads the database. The stored values are read by the model layer
(``ClusterSetting.objects.stored()`` and ``ClusterSetting.objects.load_config()``) and passed
in. ``SETTINGS`` is the one place each default is written (the seed migration keeps its own frozen
copy, as a migration must).
"""

from collections.abc import Callable, Mapping
from dataclasses import dataclass

_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}


def _positive_int(most: int) -> Callable[[str, str], str]:
    """The rule of a whole number from 1 to ``most``: beyond a bound that no cluster needs, the
    sweep's ``now() - interval`` would pass the dates the database holds."""

    def normalise(key: str, value: str) -> str:
        try:
            number = int(str(value).strip())
        except ValueError:
            raise ValueError(
                f"{key} must be a whole number of seconds/days, got {value!r}."
            ) from None
        if not 0 < number <= most:
            raise ValueError(f"{key} must be from 1 to {most}, got {number}.")
        return str(number)

    return normalise


def _boolean(key: str, value: str) -> str:
    text = str(value).strip().lower()
    if text in _TRUE:
        return "true"
    if text in _FALSE:
        return "false"
    raise ValueError(f"{key} must be true or false, got {value!r}.")


@dataclass(frozen=True)
class Setting:
    """One runtime setting: its stored default, what it means, and how its text is read."""

    key: str
    default: str
    description: str
    #: ``normalise(key, text)`` returns the text as stored, or raises ``ValueError`` saying why.
    normalise: Callable[[str, str], str]
    #: Turns normalised text into the value ``RuntimeConfig`` holds.
    to_value: Callable[[str], object]


SETTINGS: dict[str, Setting] = {
    s.key: s
    for s in (
        Setting(
            "heartbeat_seconds",
            "15",
            "Every node writes its heartbeat this often (seconds).",
            _positive_int(3600),
            int,
        ),
        Setting(
            "lost_after_seconds",
            "60",
            "A node whose last heartbeat is older than this is marked LOST (seconds, at least "
            "twice heartbeat_seconds).",
            _positive_int(7 * 86400),
            int,
        ),
        Setting(
            "retain_stopped_days",
            "7",
            "STOPPED and LOST nodes are deleted after this many days.",
            _positive_int(3650),
            int,
        ),
        Setting(
            "alert_on_lost",
            "true",
            "Mail the site admins when a node is lost (true/false).",
            _boolean,
            lambda text: text == "true",
        ),
    )
}


@dataclass(frozen=True)
class RuntimeConfig:
    """The runtime settings as values (``parse`` builds one; ``DEFAULT`` has every default)."""

    heartbeat_seconds: int
    lost_after_seconds: int
    retain_stopped_days: int
    alert_on_lost: bool

    @property
    def sweeper_ttl_seconds(self) -> int:
        """The sweeper lease lives a few heartbeats, so a dead sweeper is replaced quickly."""
        return 3 * self.heartbeat_seconds


def validate(key: str, value: str, stored: Mapping[str, str]) -> str:
    """Return ``value`` normalised, or raise ``ValueError`` saying why it is refused.

    ``stored`` are the settings as they are stored now (``ClusterSetting.objects.stored()``), for
    the rule that ties ``lost_after_seconds`` to ``heartbeat_seconds``; a missing one counts as
    its default.
    """
    if key not in SETTINGS:
        raise ValueError(f"Unknown cluster setting {key!r}; known: {', '.join(sorted(SETTINGS))}.")
    normalised = SETTINGS[key].normalise(key, value)
    if key in ("heartbeat_seconds", "lost_after_seconds"):
        current = {**stored, key: normalised}
        heartbeat = int(current.get("heartbeat_seconds", SETTINGS["heartbeat_seconds"].default))
        lost_after = int(current.get("lost_after_seconds", SETTINGS["lost_after_seconds"].default))
        if lost_after < 2 * heartbeat:
            raise ValueError(
                f"lost_after_seconds ({lost_after}) must be at least twice heartbeat_seconds "
                f"({heartbeat}): a node must miss two heartbeats before it is lost."
            )
    return normalised


def _value(setting: Setting, raw: str | None) -> object:
    """The value of ``raw``; its default when it is missing or broken (edited by hand in SQL)."""
    if raw is not None:
        try:
            return setting.to_value(setting.normalise(setting.key, raw))
        except ValueError:
            pass
    return setting.to_value(setting.default)


def parse(stored: Mapping[str, str]) -> RuntimeConfig:
    """The config from stored values; a missing or broken value falls back to its default."""
    values = {key: _value(setting, stored.get(key)) for key, setting in SETTINGS.items()}
    if values["lost_after_seconds"] < 2 * values["heartbeat_seconds"]:
        values["lost_after_seconds"] = 2 * values["heartbeat_seconds"]
    return RuntimeConfig(**values)


#: Every setting at its default (what a node uses before it has read the table).
DEFAULT = parse({})
