"""The runtime settings stored in ``cluster_setting``: their rules, and reading them.

They live in the database, not in ``settings.py``, so an operator can change them for the whole
cluster at once (from the admin) and every node picks the change up on its next heartbeat.

Rules (checked on every save, by the model and so by the admin form): integers are > 0,
``lost_after_seconds`` >= 2 x ``heartbeat_seconds`` (a node must miss at least two heartbeats
before it is declared lost), booleans are ``true``/``false``.
"""

from collections.abc import Callable
from dataclasses import dataclass

SEEDS: dict[str, tuple[str, str]] = {
    "heartbeat_seconds": ("15", "Every node writes its heartbeat this often (seconds)."),
    "lost_after_seconds": (
        "60",
        "A node whose last heartbeat is older than this is marked LOST (seconds, at least twice "
        "heartbeat_seconds).",
    ),
    "retain_stopped_days": ("7", "STOPPED and LOST nodes are deleted after this many days."),
    "alert_on_lost": ("true", "Mail the site admins when a node is lost (true/false)."),
}

_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}


def _positive_int(key: str, value: str) -> str:
    try:
        number = int(str(value).strip())
    except ValueError:
        raise ValueError(f"{key} must be a whole number of seconds/days, got {value!r}.") from None
    if number <= 0:
        raise ValueError(f"{key} must be greater than 0, got {number}.")
    return str(number)


def _boolean(key: str, value: str) -> str:
    text = str(value).strip().lower()
    if text in _TRUE:
        return "true"
    if text in _FALSE:
        return "false"
    raise ValueError(f"{key} must be true or false, got {value!r}.")


_RULES: dict[str, Callable[[str, str], str]] = {
    "heartbeat_seconds": _positive_int,
    "lost_after_seconds": _positive_int,
    "retain_stopped_days": _positive_int,
    "alert_on_lost": _boolean,
}


@dataclass(frozen=True)
class RuntimeConfig:
    heartbeat_seconds: int = 15
    lost_after_seconds: int = 60
    retain_stopped_days: int = 7
    alert_on_lost: bool = True

    @property
    def sweeper_ttl_seconds(self) -> int:
        """The sweeper lease lives a few heartbeats, so a dead sweeper is replaced quickly."""
        return 3 * self.heartbeat_seconds


DEFAULT = RuntimeConfig()


def validate(key: str, value: str, stored: dict[str, str] | None = None) -> str:
    """Return ``value`` normalised, or raise ``ValueError`` saying why it is refused.

    ``stored`` are the other settings as they are now (read from the database when omitted), for
    the rule that ties ``lost_after_seconds`` to ``heartbeat_seconds``.
    """
    if key not in _RULES:
        raise ValueError(f"Unknown cluster setting {key!r}; known: {', '.join(sorted(_RULES))}.")
    normalised = _RULES[key](key, value)
    if key in ("heartbeat_seconds", "lost_after_seconds"):
        current = dict(stored) if stored is not None else _stored()
        current[key] = normalised
        heartbeat = int(current.get("heartbeat_seconds", SEEDS["heartbeat_seconds"][0]))
        lost_after = int(current.get("lost_after_seconds", SEEDS["lost_after_seconds"][0]))
        if lost_after < 2 * heartbeat:
            raise ValueError(
                f"lost_after_seconds ({lost_after}) must be at least twice heartbeat_seconds "
                f"({heartbeat}): a node must miss two heartbeats before it is lost."
            )
    return normalised


def _stored() -> dict[str, str]:
    from qcluster.models import ClusterSetting

    return dict(ClusterSetting.objects.values_list("key", "value"))


def parse(stored: dict[str, str]) -> RuntimeConfig:
    """The config from stored values; a missing or broken value falls back to its default."""
    values = {}
    for key, default in DEFAULT.__dict__.items():
        raw = stored.get(key)
        if raw is None:
            values[key] = default
            continue
        try:
            text = _RULES[key](key, raw)
        except ValueError:
            values[key] = default
            continue
        values[key] = text == "true" if isinstance(default, bool) else int(text)
    if values["lost_after_seconds"] < 2 * values["heartbeat_seconds"]:
        values["lost_after_seconds"] = 2 * values["heartbeat_seconds"]
    return RuntimeConfig(**values)


def load() -> RuntimeConfig:
    """Read the settings from the database (one query)."""
    return parse(_stored())
