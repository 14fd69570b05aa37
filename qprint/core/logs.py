"""Log formatters: ``event key=value`` lines (the default) or the same as JSON lines.

qprint and qcluster log one line per state change, written ``event key=value ...``
(``job_status job=... from=CLAIMED to=PRINTED``) and nothing per idle ping or idle heartbeat.
:class:`KeyValueFormatter` prints those lines as they are, after the time, level and logger;
:class:`JsonFormatter` prints one JSON object per line with the same fields parsed out (``event``
and each ``key``), for log pipelines that index fields. Select one in Django's ``LOGGING``::

    "formatters": {"json": {"()": "qprint.core.logs.JsonFormatter"}}

(the example project does it when ``LOG_FORMAT=json``; docs/OPERATIONS.md, "Logs").
"""

from __future__ import annotations

import json
import logging
import re
from datetime import UTC, datetime
from typing import Any

#: ``key=value`` pairs; a value runs to the next `` key=`` (so a repr with spaces stays whole).
_FIELD = re.compile(r"(?:^|\s)([A-Za-z_][\w.]*)=(.*?)(?=\s[A-Za-z_][\w.]*=|\s*$)", re.S)
_RESERVED = frozenset({"time", "level", "logger", "event", "message", "exception"})


def fields_of(message: str) -> dict[str, Any]:
    """``{"event": ..., key: value, ...}`` of an ``event key=value`` line (values as text)."""
    head, _, _rest = message.partition(" ")
    out: dict[str, Any] = {}
    if head and "=" not in head:
        out["event"] = head
    for key, value in _FIELD.findall(message):
        out.setdefault(f"field_{key}" if key in _RESERVED else key, value)
    return out


class KeyValueFormatter(logging.Formatter):
    """``2026-01-01 12:00:00,123 INFO qprint.events job_status job=... to=PRINTED``.

    One event, one line: a line break in a value (a device name, a client's host name) is
    written escaped (``\\n``), so no client can write a line that reads as another event. A
    traceback still follows on its own lines."""

    def __init__(self, fmt: str | None = None, **kwargs: Any) -> None:
        super().__init__(fmt or "%(asctime)s %(levelname)s %(name)s %(message)s", **kwargs)

    def formatMessage(self, record: logging.LogRecord) -> str:
        record.message = one_line(record.message)
        return super().formatMessage(record)


def one_line(text: str) -> str:
    """``text`` with its line breaks written escaped."""
    if "\n" not in text and "\r" not in text:
        return text
    return text.replace("\r", "\\r").replace("\n", "\\n")


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ``time`` (UTC, ISO 8601), ``level``, ``logger``, ``event``, the
    ``key=value`` fields, the whole ``message``, and ``exception`` when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        out: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
        }
        out.update(fields_of(message))
        out["message"] = message
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False, default=str)
