"""The kinds of ``QPRINT`` setting the declarations share (:mod:`qprint.core.conf` and
:mod:`qprint.core.conf_features`): a count, seconds, an input limit and a list of strings, each
with its rule and check id, written once so the two declaring modules cannot drift apart.
"""

from __future__ import annotations

from typing import Any

from qprint.core.cluster import Setting, positive_int, positive_number

LIMITS_HINT = 'See docs/SECURITY.md, "Limits".'


def count(name: str, default: int, doc: str) -> Setting:
    """A positive integer (``qprint.E003``)."""
    return Setting(
        name, default, doc, must="a positive integer", valid=positive_int, error="qprint.E003"
    )


def seconds(name: str, default: float, doc: str) -> Setting:
    """A positive number of seconds, fractions allowed (``qprint.E003``)."""
    return Setting(
        name,
        default,
        doc,
        must="a positive number of seconds",
        valid=positive_number,
        error="qprint.E003",
    )


def limit(name: str, default: int, doc: str, more=None) -> Setting:
    """An input limit or the authentication throttle, a positive integer (``qprint.E009``)."""
    return Setting(
        name,
        default,
        doc,
        must="a positive integer",
        valid=positive_int,
        error="qprint.E009",
        hint=LIMITS_HINT,
        more=more,
    )


def strings(value: Any) -> bool:
    """A list (or tuple) of strings."""
    return isinstance(value, list | tuple) and all(isinstance(h, str) for h in value)
