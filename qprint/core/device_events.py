"""A device event's body as the device sends it (docs/API.md, "Events"): parsed and checked once,
and its fingerprint, the SHA-256 of its canonical content.

No model here: :mod:`qprint.domain.events` records what this parses (and the submission
fingerprints its request with :func:`fingerprint_of`).
"""

import hashlib
import json
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.utils.dateparse import parse_datetime

from qprint.core import inputs
from qprint.core.conf import qprint_settings
from qprint.core.errors import Invalid
from qprint.core.states import DEVICE_EVENT_TYPES


@dataclass(frozen=True)
class DeviceEvent:
    """A validated device event body."""

    event_id: uuid.UUID
    type: str
    claim_id: uuid.UUID
    occurred_at: datetime
    message: str
    detail: dict[str, Any]

    def fingerprint(self, job_id: uuid.UUID) -> str:
        return fingerprint_of(
            {
                "job_id": str(job_id),
                "type": self.type,
                "claim_id": str(self.claim_id),
                "occurred_at": self.occurred_at.isoformat(),  # in UTC
                "message": self.message,
                "detail": self.detail,
            }
        )


def canonical_json(content: dict[str, Any]) -> str:
    """The canonical JSON of ``content`` (sorted keys, no whitespace): what a fingerprint hashes."""
    return json.dumps(content, sort_keys=True, separators=(",", ":"), default=str)


def fingerprint_of(content: dict[str, Any]) -> str:
    """SHA-256 of the canonical JSON of ``content`` (:func:`canonical_json`)."""
    return hashlib.sha256(canonical_json(content).encode("utf-8")).hexdigest()


def parse_device_event(payload: Any) -> DeviceEvent:
    """Validate an event body; :class:`~qprint.core.errors.Invalid` names the first bad field."""
    if not isinstance(payload, dict):
        raise Invalid(message="The body must be a JSON object.")
    event_id = _uuid_field(payload, "event_id")
    event_type = payload.get("type")
    if not isinstance(event_type, str) or event_type not in DEVICE_EVENT_TYPES:
        raise Invalid(
            message=f"'type' must be one of {', '.join(sorted(DEVICE_EVENT_TYPES))}; "
            f"got {event_type!r}."
        )
    claim_id = _uuid_field(payload, "claim_id")
    raw_time = payload.get("occurred_at")
    try:
        occurred_at = parse_datetime(raw_time) if isinstance(raw_time, str) else None
    except ValueError:  # well formed but no such time (minute 99)
        occurred_at = None
    if occurred_at is None:
        raise Invalid(message="'occurred_at' must be an ISO 8601 date and time.")
    if occurred_at.tzinfo is None:
        occurred_at = occurred_at.replace(tzinfo=UTC)
    try:
        occurred_at = occurred_at.astimezone(UTC)
    except OverflowError:  # year 1 at +14:00 is year 0 in UTC: no such date
        raise Invalid(message="'occurred_at' is out of the range of dates.") from None
    message = inputs.text("message", payload.get("message"), qprint_settings.MAX_MESSAGE_LENGTH)
    detail = inputs.json_object("detail", payload.get("detail"), qprint_settings.MAX_DETAIL_BYTES)
    return DeviceEvent(event_id, event_type, claim_id, occurred_at, message, detail)


def _uuid_field(payload: dict[str, Any], name: str) -> uuid.UUID:
    value = payload.get(name)
    if value is None:
        raise Invalid(message=f"'{name}' is required.")
    if not isinstance(value, str) or len(value) > 64:
        raise Invalid(message=f"'{name}' must be a UUID (a string).")
    try:
        return uuid.UUID(value)
    except ValueError:
        raise Invalid(message=f"'{name}' must be a UUID.") from None
