"""Checks of the values that reach the domain from outside (the HTTP APIs, the socket, host code).

Each raises :class:`qprint.errors.Invalid` (422) naming the field, so every transport refuses bad
input with the same answer.
"""

from __future__ import annotations

from typing import Any

from qprint.errors import Invalid


def text(name: str, value: Any, max_length: int) -> str:
    """An optional string of at most ``max_length`` characters (``None`` reads as ``""``)."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise Invalid(message=f"'{name}' must be a string.")
    if len(value) > max_length:
        raise Invalid(message=f"'{name}' is longer than {max_length} characters.")
    return value


def json_object(name: str, value: Any) -> dict[str, Any]:
    """An optional JSON object (``None`` reads as ``{}``)."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise Invalid(message=f"'{name}' must be a JSON object.")
    return value
