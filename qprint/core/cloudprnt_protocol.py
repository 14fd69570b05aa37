"""Star CloudPRNT on the wire, server side: the poll's JSON, the printer's status codes, the
answers. Pure: no I/O, no Django (docs/CLOUDPRNT.md).

A CloudPRNT printer ``POST``s a JSON object to the server URL every poll interval::

    {"status": "23 6 0 0 0 0 0 0 0 ", "printerMAC": "00:11:62:00:00:00",
     "statusCode": "200%20OK", "printingInProgress": false,
     "clientAction": [{"request": "ClientType", "result": "Star mC-Print3"}], ...}

and the server answers ``{"jobReady": false}`` or ``{"jobReady": true, "mediaTypes": [...],
"jobToken": "...", "deleteMethod": "DELETE"}``, optionally with ``clientAction`` requests that the
printer answers in its next poll. The printer then ``GET``s ``?mac=&type=&token=`` and, once
printed, ``DELETE``s ``?mac=&code=&token=`` (or ``GET ?delete&mac=&code=&token=``).

What this module knows: :func:`parse_poll` (a poll body, refused with :class:`ProtocolError`
naming the field), :func:`printer_status` (a ``statusCode`` as a printer state and IPP-style
``printer-state-reasons``), :func:`confirmation` (a confirmation's ``code``), :func:`poll_answer`,
:func:`normalize_mac`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

from qprint.core.text import digits, storable

#: What the server asks the printer about itself, answered in its next poll's ``clientAction``.
CLIENT_ACTIONS = ("ClientType", "ClientVersion", "Encodings", "GetPollInterval")

#: The confirmation method qprint asks for (``GET ?delete`` is accepted as well).
DELETE_METHOD = "DELETE"

MAX_MAC_LENGTH = 32
MAX_STATUS_LENGTH = 200
MAX_RESULT_LENGTH = 1000
MAX_ACTIONS = 32

_MAC = re.compile(r"^[0-9a-f]{2}([:-]?[0-9a-f]{2}){5,7}$")


class ProtocolError(ValueError):
    """A request the CloudPRNT transport refuses (400), the message naming the field."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass(frozen=True)
class PrinterStatus:
    """A printer's ``statusCode`` as qprint shows a printer: ``state`` (``idle``,
    ``processing``, ``stopped``, as IPP ``printer-state``) with ``reasons`` (IPP
    ``printer-state-reasons`` keywords such as ``media-empty``), the code and its meaning."""

    code: str
    meaning: str
    state: str
    reasons: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.code.startswith("2")

    @property
    def text(self) -> str:
        """``"410 Out of paper"``: the code and its meaning, as ``status_reason`` shows it."""
        return f"{self.code} {self.meaning}".strip()

    @property
    def label(self) -> str:
        """The printer's ``status`` column: the state, and its reasons when there are any."""
        return f"{self.state} ({', '.join(self.reasons)})" if self.reasons else self.state


#: Star's status codes (CloudPRNT developer guide, "Printer status codes"): the meaning qprint
#: shows, the printer state and reasons. 2xx: ready; 4xx: the printer cannot print; 5xx: the job
#: or its download failed. A code not listed is judged by its class.
STATUS_CODES: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "200": ("OK", "idle", ()),
    "211": ("Paper low", "idle", ("media-low",)),
    "212": ("Paper low", "idle", ("media-low",)),
    "220": ("Printing", "processing", ()),
    "400": ("Printer offline", "stopped", ("offline-report",)),
    "401": ("Printer offline", "stopped", ("offline-report",)),
    "402": ("Unrecoverable error", "stopped", ("other-error",)),
    "410": ("Out of paper", "stopped", ("media-empty",)),
    "411": ("Paper jam", "stopped", ("media-jam",)),
    "412": ("Paper near end", "stopped", ("media-low",)),
    "420": ("Cover open", "stopped", ("cover-open",)),
    "421": ("Auto-cutter error", "stopped", ("cutter-error",)),
    "422": ("Head temperature error", "stopped", ("other-error",)),
    "430": ("Mechanical error", "stopped", ("other-error",)),
    "500": ("Printer error", "stopped", ("other-error",)),
    "510": ("Incompatible media type", "idle", ("document-format-error",)),
    "511": ("Job too large", "idle", ("document-format-error",)),
    "520": ("Job download failed", "idle", ("other-warning",)),
    "521": ("Job download timed out", "idle", ("other-warning",)),
    "522": ("Job data invalid", "idle", ("document-format-error",)),
}

_CLASS_MEANINGS = {
    "2": ("OK", "idle", ()),
    "4": ("Printer error", "stopped", ("other-error",)),
    "5": ("Job error", "idle", ("other-warning",)),
}


def printer_status(status_code: Any, printing: bool = False) -> PrinterStatus:
    """The printer state a ``statusCode`` (``"200 OK"``, ``"410%20Out%20of%20paper"``, or the
    bare code) describes. ``printing``: the poll's ``printingInProgress``."""
    text = unquote(str(status_code or "")).strip()[:MAX_STATUS_LENGTH]
    code, _, said = text.partition(" ")
    if not code:
        code = "200"
    meaning, state, reasons = STATUS_CODES.get(code) or _CLASS_MEANINGS.get(
        code[:1], ("Unknown status", "stopped", ("other-error",))
    )
    if code not in STATUS_CODES and said.strip():
        meaning = said.strip()
    if printing and state == "idle":
        state = "processing"
    return PrinterStatus(code=code, meaning=meaning, state=state, reasons=reasons)


@dataclass(frozen=True)
class Confirmation:
    """A confirmation's ``code``: ``printed`` for 2xx (or ``OK``), else a failure."""

    printed: bool
    status: PrinterStatus


def confirmation(code: Any) -> Confirmation:
    """What a confirmation's ``code`` means: a code beginning with ``2`` (or ``OK``) is printed;
    any other code is a failure with its meaning (``410 Out of paper``)."""
    text = unquote(str(code or "")).strip()
    if text.upper().startswith("OK"):
        text = "200 OK"
    status = printer_status(text or "200")
    return Confirmation(printed=status.ok, status=status)


def normalize_mac(value: Any) -> str:
    """A MAC address in one spelling (lower case, colons); :class:`ProtocolError` otherwise."""
    if not isinstance(value, str) or not value.strip() or len(value) > MAX_MAC_LENGTH:
        raise ProtocolError("printerMAC: a MAC address is required.")
    mac = unquote(value).strip().lower()
    if not _MAC.match(mac):
        raise ProtocolError(f"printerMAC: {value[:40]!r} is not a MAC address.")
    digits = re.sub(r"[^0-9a-f]", "", mac)
    return ":".join(digits[i : i + 2] for i in range(0, len(digits), 2))


@dataclass(frozen=True)
class Poll:
    """A checked poll: the printer's MAC, its state, and what it answered of ``clientAction``."""

    mac: str
    status: PrinterStatus
    printing: bool
    #: ``{request: result}`` of the ``clientAction`` answers (``ClientType``, ...).
    reported: dict[str, str] = field(default_factory=dict)

    def about_itself(self) -> dict[str, Any]:
        """What the printer told of itself in this poll, as printer capabilities
        (``model``, ``firmware``, ``encodings``, ``poll_interval``); empty when nothing."""
        found: dict[str, Any] = {}
        if self.reported.get("ClientType"):
            found["model"] = self.reported["ClientType"]
        if self.reported.get("ClientVersion"):
            found["firmware"] = self.reported["ClientVersion"]
        if "Encodings" in self.reported:
            found["encodings"] = [
                e.strip() for e in self.reported["Encodings"].split(";") if e.strip()
            ][:MAX_ACTIONS]
        interval = self.reported.get("GetPollInterval", "").strip()
        if digits(interval) and 0 < int(interval) <= 3600:
            found["poll_interval"] = int(interval)
        return found


def parse_poll(body: bytes) -> Poll:
    """A poll body, checked (:class:`ProtocolError` naming what is wrong)."""
    try:
        data = json.loads(body.decode("utf-8")) if body else None
    except (UnicodeDecodeError, ValueError):
        raise ProtocolError("body: the poll must be a JSON object.") from None
    if not isinstance(data, dict):
        raise ProtocolError("body: the poll must be a JSON object.")
    mac = normalize_mac(data.get("printerMAC"))
    status_code = data.get("statusCode", "200 OK")
    if not isinstance(status_code, str | int) or isinstance(status_code, bool):
        raise ProtocolError("statusCode: a string such as '200 OK' is required.")
    if not storable(unquote(str(status_code))):
        raise ProtocolError("statusCode: holds a NUL character or a lone surrogate.")
    printing = data.get("printingInProgress", False)
    if not isinstance(printing, bool):
        raise ProtocolError("printingInProgress: true or false.")
    return Poll(
        mac=mac,
        status=printer_status(status_code, printing),
        printing=printing,
        reported=_client_actions(data.get("clientAction")),
    )


def _client_actions(actions: Any) -> dict[str, str]:
    if actions is None:
        return {}
    if not isinstance(actions, list) or len(actions) > MAX_ACTIONS:
        raise ProtocolError(f"clientAction: a list of at most {MAX_ACTIONS} objects.")
    reported: dict[str, str] = {}
    for item in actions:
        if not isinstance(item, dict):
            raise ProtocolError("clientAction: each entry must be an object.")
        request, result = item.get("request"), item.get("result")
        if isinstance(request, str) and request in CLIENT_ACTIONS and result is not None:
            reported[request] = str(result)[:MAX_RESULT_LENGTH]
            if not storable(reported[request]):
                raise ProtocolError(
                    f"clientAction: the result of {request} holds a NUL character or a lone "
                    "surrogate."
                )
    return reported


def poll_answer(
    *, job_token: str | None = None, media_types: tuple[str, ...] = (), ask: bool = False
) -> dict[str, Any]:
    """The poll's answer: a job ready in ``media_types`` under ``job_token``, or none (then,
    with ``ask``, the ``clientAction`` requests that make the printer describe itself)."""
    if job_token is not None:
        return {
            "jobReady": True,
            "mediaTypes": list(media_types),
            "jobToken": job_token,
            "deleteMethod": DELETE_METHOD,
        }
    answer: dict[str, Any] = {"jobReady": False}
    if ask:
        answer["clientAction"] = [{"request": request, "options": ""} for request in CLIENT_ACTIONS]
    return answer


def job_headers(options: dict[str, Any]) -> dict[str, str]:
    """The ``X-Star-*`` headers of a job's GET from its options: ``cut`` (``full``, ``partial``,
    ``none``; with ``feed``), ``buzzer_start`` / ``buzzer_end`` (pulses, 1 to 9)."""
    headers: dict[str, str] = {}
    cut = options.get("cut")
    if cut in CUTS:
        feed = options.get("feed")
        headers["X-Star-Cut"] = f"{cut}; feed={'false' if feed is False else 'true'}"
    for option, header in (
        ("buzzer_start", "X-Star-Buzzerstartpattern"),
        ("buzzer_end", "X-Star-Buzzerendpattern"),
    ):
        value = options.get(option)
        if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= 9:
            headers[header] = str(value)
    return headers


CUTS = ("full", "partial", "none")
