"""The one boundary for values that reach the domain from outside (the HTTP APIs, the socket's
frames, host code through ``qprint.api``): every string and JSON value that can reach the
database is checked here, once, where the input is parsed.

Invariant: nothing past this module holds a value PostgreSQL would refuse or a client could use to
exhaust a node: no NUL character (``\\u0000``, refused by PostgreSQL text and ``jsonb``), no lone
surrogate (``\\ud800``, not encodable as UTF-8), no ``NaN``/``Infinity`` (not JSON), no JSON nested
deeper than ``MAX_JSON_DEPTH``, no list or object with more than ``MAX_JSON_ITEMS`` entries, and no
text or JSON value longer than its limit (docs/SECURITY.md, "Limits").

Each refusal is an :class:`qprint.core.errors.Invalid` (HTTP 422, a ``4400`` close on the
socket) whose message names the field, with its own code:

- ``invalid``: the wrong type (or not JSON at all);
- ``invalid_text``: a NUL character or a lone surrogate, in a string or an object key;
- ``too_deep``: JSON nested deeper than ``MAX_JSON_DEPTH``;
- ``too_long``: a string or a JSON value over its length or size limit;
- ``too_many``: a list (or object) with more entries than allowed, or too many printers.
"""

from __future__ import annotations

import json
import math
from typing import Any

from django.core.exceptions import ValidationError

from qprint.core.conf import qprint_settings
from qprint.core.errors import Invalid
from qprint.core.text import has_control_character, storable

INVALID = "invalid"
INVALID_TEXT = "invalid_text"
TOO_DEEP = "too_deep"
TOO_LONG = "too_long"
TOO_MANY = "too_many"
#: Every code this module answers with (docs/API.md, "Error codes").
CODES = (INVALID, INVALID_TEXT, TOO_DEEP, TOO_LONG, TOO_MANY)


def refuse(code: str, name: str, problem: str) -> Invalid:
    return Invalid(code, f"'{name}' {problem}")


def check_string(name: str, value: str) -> str:
    """``value`` unless it holds a NUL or a lone surrogate (``invalid_text``)."""
    if not storable(value):
        raise refuse(INVALID_TEXT, name, "holds a NUL character or a lone surrogate.")
    return value


def text(name: str, value: Any, max_length: int) -> str:
    """An optional string of at most ``max_length`` characters (``None`` reads as ``""``)."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise refuse(INVALID, name, "must be a string.")
    if len(value) > max_length:
        raise refuse(TOO_LONG, name, f"is longer than {max_length} characters.")
    return check_string(name, value)


def label(name: str, value: Any, max_length: int) -> str:
    """Who did something, as host code names it (``by``, ``submitted_by``): a string the database
    holds (``None`` reads as ``""``), cut to ``max_length``."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise refuse(INVALID, name, "must be a string.")
    return check_string(name, value)[:max_length]


def required_text(name: str, value: Any, max_length: int) -> str:
    """A non-empty string of at most ``max_length`` characters."""
    checked = text(name, value, max_length)
    if not checked.strip():
        raise refuse(INVALID, name, "is required (a non-empty string).")
    return checked


#: Why a device name may not hold "/" nor a control character: the name is one segment of the
#: device's API URLs (``api/v1/devices/<name>/pause``), where a "/" would name another device or
#: another action, and a field of its log lines, which a line break would split.
DEVICE_NAME_RULE = "may not contain '/' nor a control character: it is part of URLs and logs."


def line(name: str, value: Any, max_length: int) -> str:
    """:func:`text` that fits on one line: no control character (a line break in a value a
    client sent would split the log line that shows it)."""
    checked = text(name, value, max_length)
    if has_control_character(checked):
        raise refuse(INVALID_TEXT, name, "holds a control character (a line break, say).")
    return checked


def check_device_name(name: str, value: str) -> str:
    """``value``, a device's name as it is made (text already checked), unless it holds a "/" or
    a control character (``invalid``)."""
    if not _device_name_allowed(value):
        raise refuse(INVALID, name, DEVICE_NAME_RULE)
    return value


def validate_device_name(value: str) -> None:
    """The model field's validator of the same rule (admin forms)."""
    if not _device_name_allowed(value):
        raise ValidationError(f"A device name {DEVICE_NAME_RULE}", code="invalid")


def _device_name_allowed(value: str) -> bool:
    return "/" not in value and not has_control_character(value)


def integer(name: str, value: Any) -> int:
    """A JSON integer: an int, or a number with no fraction (``3.0``: JSON does not tell them
    apart). Never a boolean."""
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise refuse(INVALID, name, "must be an integer.")
    return value


def lookup_name(name: str, value: Any, max_length: int = 255) -> str | None:
    """A name used only to look a row up (a device name in a URL or a query string). ``None``
    when it cannot name any row, so the caller answers as for a name that does not exist
    (never a database error)."""
    if not isinstance(value, str) or len(value) > max_length or not storable(value):
        return None
    return value


#: The longest tenant a row holds (every ``tenant`` column).
TENANT_MAX_LENGTH = 100


def no_row_has_tenant(tenant: Any) -> bool:
    """Whether ``tenant`` is a value no row's tenant can be (not a string, too long, or text the
    database cannot hold): the caller answers as for a tenant that has nothing."""
    return lookup_name("tenant", tenant, TENANT_MAX_LENGTH) is None


def json_value(name: str, value: Any, max_bytes: int | None = None) -> Any:
    """Any JSON value, checked: JSON types only, strings and keys storable, nesting at most
    ``MAX_JSON_DEPTH``, lists and objects of at most ``MAX_JSON_ITEMS`` entries, and (with
    ``max_bytes``) at most that many bytes once encoded as JSON."""
    _walk(name, value, 1, _limits(), strings=True)
    if max_bytes is not None:
        size = len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8"))
        if size > max_bytes:
            raise refuse(TOO_LONG, name, f"is {size} bytes as JSON; the limit is {max_bytes}.")
    return value


def json_object(name: str, value: Any, max_bytes: int | None = None) -> dict[str, Any]:
    """An optional JSON object (``None`` reads as ``{}``), checked as :func:`json_value`."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise refuse(INVALID, name, "must be a JSON object.")
    return json_value(name, value, max_bytes)


def json_list(name: str, value: Any, max_items: int) -> list[Any]:
    """A JSON list of at most ``max_items`` entries (``too_many``)."""
    if not isinstance(value, list):
        raise refuse(INVALID, name, "must be a list.")
    if len(value) > max_items:
        raise refuse(TOO_MANY, name, f"has {len(value)} entries; the limit is {max_items}.")
    return value


def _limits() -> tuple[int, int]:
    return int(qprint_settings.MAX_JSON_DEPTH), int(qprint_settings.MAX_JSON_ITEMS)


def _walk(name: str, value: Any, depth: int, limits: tuple[int, int], *, strings: bool) -> None:
    max_depth, max_items = limits
    if depth > max_depth:
        raise refuse(TOO_DEEP, name, f"is nested deeper than {max_depth} levels.")
    if isinstance(value, str):
        if strings:
            check_string(name, value)
    elif isinstance(value, bool) or value is None or isinstance(value, int):
        return
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise refuse(INVALID, name, "holds a number that is not finite.")
    elif isinstance(value, dict):
        if len(value) > max_items:
            raise refuse(TOO_MANY, name, f"has {len(value)} keys; the limit is {max_items}.")
        for key, item in value.items():
            if not isinstance(key, str):
                raise refuse(INVALID, name, "has a key that is not a string.")
            if strings:
                check_string(name, key)
            _walk(name, item, depth + 1, limits, strings=strings)
    elif isinstance(value, list | tuple):
        if len(value) > max_items:
            raise refuse(TOO_MANY, name, f"has {len(value)} entries; the limit is {max_items}.")
        for item in value:
            _walk(name, item, depth + 1, limits, strings=strings)
    else:
        raise refuse(INVALID, name, f"holds a {type(value).__name__}, which is not JSON.")


def _no_constant(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON")


def parse_json(name: str, data: bytes | str) -> Any:
    """Parse JSON text from outside and check its shape: nesting at most ``MAX_JSON_DEPTH``,
    lists and objects of at most ``MAX_JSON_ITEMS`` entries, no ``NaN``/``Infinity``. Input nested
    too deep for the parser itself is ``too_deep``, never a crash. The strings are checked by the
    domain function that takes each field (:func:`text`, :func:`json_value`), so a refusal names
    the field; the transport bounds the body's size."""
    try:
        value = json.loads(data, parse_constant=_no_constant)
    except RecursionError:
        raise refuse(TOO_DEEP, name, "is nested too deeply to parse.") from None
    except ValueError as exc:  # JSONDecodeError, bad UTF-8, an integer of too many digits
        raise refuse(INVALID, name, f"is not JSON ({exc}).") from None
    _walk(name, value, 1, _limits(), strings=False)
    return value
