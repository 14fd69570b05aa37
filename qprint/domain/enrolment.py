"""Enrolling an agent by code (after RFC 8628, the device authorization grant; docs/AGENT.md).

An agent starts an enrolment (:func:`start`) and gets two codes: the **device code**, its secret
for collecting the token, and the short **user code** (``WDJB-MJHT``) that it shows its user. An
operator types the user code on the admin's "Enrol a device" page or in ``manage.py qprint_device
approve`` (:func:`approve`, :func:`deny`); the agent polls (:func:`poll`) and, once approved,
receives its device token.

Invariants (this module is the one writer of ``qprint_enrolment``):

- Only hashes of the codes are stored: SHA-256 of the device code (256 random bits), an HMAC
  keyed with the project's ``SECRET_KEY`` of the user code (so the table alone does not give
  the short code back). Neither code is ever logged; the token is never stored at all.
- A code is single use: an enrolment is decided once (pending -> approved | denied, under the
  row's lock), and the token is handed out once: the poll that finds the enrolment approved
  gives the device a fresh token (:func:`~qprint.domain.credentials.rotate_device_token`) and
  marks it issued in the same transaction. The approval itself never sees a usable token: a new
  device is made with a token nobody holds, an existing device's token is rotated at once (its
  old agent's socket closes 4001 on the rotation's wakeup or its next ping).
- Expiry and the poll interval are judged on the database clock. Every look-up by a code passes
  the throttle of failed authentications (:func:`_through_throttle`, the one call into
  :mod:`qprint.domain.throttle`): unknown codes count as failures of the source address.
- Expired enrolments are deleted by the retention task (:func:`purge_expired`).
"""

from __future__ import annotations

import logging
import math
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

from django.db import transaction
from django.db.models import F
from django.db.models.functions import Now
from django.utils.crypto import salted_hmac

from qprint.core import inputs
from qprint.core.conf import qprint_settings
from qprint.core.errors import Conflict, EnrolmentRefused, Invalid, NotFound, RateLimited
from qprint.domain import credentials, throttle
from qprint.models import Device, DeviceKind, Enrolment, EnrolmentStatus

logger = logging.getLogger("qprint.enrolment")

T = TypeVar("T")

#: RFC 8628's example alphabet: consonants only, so no word is spelt and nothing looks like a
#: digit (no vowels: no O/0, I/1; no Y).
USER_CODE_ALPHABET = "BCDFGHJKLMNPQRSTVWXZ"
USER_CODE_LETTERS = 8
#: RFC 8628 3.5: each ``slow_down`` raises the interval by five seconds.
SLOW_DOWN_SECONDS = 5
#: ``agent_info`` keys kept, each a string of at most this many characters.
AGENT_INFO_KEYS = ("hostname", "platform", "version", "python", "machine")
AGENT_INFO_LENGTH = 255


@dataclass(frozen=True)
class Started:
    """A new enrolment as the agent is told it (the codes exist only here and in its memory)."""

    enrolment_id: int
    device_code: str
    user_code: str
    expires_in: int
    interval: int


@dataclass(frozen=True)
class Grant:
    """The token, handed to the agent once."""

    token: str
    tenant: str
    device: str


def new_user_code() -> str:
    letters = "".join(secrets.choice(USER_CODE_ALPHABET) for _ in range(USER_CODE_LETTERS))
    return f"{letters[:4]}-{letters[4:]}"


def normalise_user_code(code: str) -> str:
    """What a person typed, as the code: case, spaces and dashes do not matter."""
    return "".join(c for c in str(code).upper() if c.isalpha())


def user_code_hash(code: str) -> str:
    return salted_hmac(
        "qprint.enrolment.user-code", normalise_user_code(code), algorithm="sha256"
    ).hexdigest()


def _through_throttle(source: str, secret: str, kind: str, find: Callable[[], T | None]) -> T:
    """The row ``find()`` answers, through the throttle of failed authentications: refused with
    :class:`~qprint.errors.RateLimited` once ``source`` failed too often (even for a right
    code), a failure counted when it answers nothing. ``secret`` is what the throttle's prefix
    scope sees: never a short code itself (the user code's keyed hash stands for it). The one
    place this module calls :mod:`qprint.domain.throttle`."""
    refusal = throttle.refusal(source, secret)
    if refusal is not None:
        raise refusal
    found = find()
    if found is None:
        throttle.record_failure(source, secret, kind)
    return found


def _agent_info(value: Any) -> dict[str, str]:
    info = inputs.json_object("agent_info", value, 8192)
    return {
        key: inputs.line(f"agent_info.{key}", info[key], AGENT_INFO_LENGTH)
        for key in AGENT_INFO_KEYS
        if info.get(key) is not None
    }


def start(agent_info: Any, *, source: str) -> Started:
    """A new pending enrolment for the agent at ``source`` (refused while ``source`` is
    throttled for failed codes, or has ``ENROLMENT_PENDING_PER_ADDRESS`` enrolments waiting:
    a start needs no credential, so it may not fill the operator's page)."""
    info = _agent_info(agent_info)
    _through_throttle(source, "", "enrolment_start", lambda: True)  # refused while throttled
    _refuse_beyond_pending(source[:100])
    expires_in = int(qprint_settings.ENROLMENT_EXPIRES_SECONDS)
    interval = int(qprint_settings.ENROLMENT_INTERVAL_SECONDS)
    device_code = credentials.new_secret()
    for _attempt in range(5):  # 20**8 codes: a clash with a live one is rare, retried
        user_code = new_user_code()
        code_hash = user_code_hash(user_code)
        if Enrolment.objects.filter(user_code_hash=code_hash).exists():
            continue
        enrolment = Enrolment.objects.create(
            device_code_hash=credentials.hash_secret(device_code),
            user_code_hash=code_hash,
            expires_at=Now() + timedelta(seconds=expires_in),
            interval=interval,
            agent_info=info,
            source_address=source[:100],
        )
        break
    else:  # pragma: no cover - five clashes in a row
        raise Invalid("busy", "No free enrolment code; try again.")
    logger.info(
        "enrolment_started enrolment=%s source=%s hostname=%s",
        enrolment.pk,
        source,
        info.get("hostname", "-"),
    )
    return Started(enrolment.pk, device_code, user_code, expires_in, interval)


def poll(device_code: str, *, source: str) -> Grant:
    """The agent's poll: its token once approved (then never again), else
    :class:`~qprint.errors.EnrolmentRefused` with ``authorization_pending``, ``slow_down``
    (polled again within half an interval: the interval grows by five seconds),
    ``expired_token``, ``access_denied`` or ``invalid_grant`` (unknown or already used)."""
    if not isinstance(device_code, str) or not device_code or len(device_code) > 200:
        raise EnrolmentRefused("invalid_request", "device_code is required (a string).")
    digest = credentials.hash_secret(device_code)
    found = _through_throttle(
        source,
        device_code,
        "enrolment_poll",
        lambda: (
            Enrolment.objects.filter(device_code_hash=digest).values_list("pk", flat=True).first()
        ),
    )
    if found is None:
        raise EnrolmentRefused("invalid_grant", "Unknown device code.")
    refusal: EnrolmentRefused | None = None
    grant: Grant | None = None
    with transaction.atomic():
        # The device is read after the lock, in a statement of its own: a join here would read
        # it from the snapshot taken before the lock waited on an approval, without the device
        # that approval made.
        row = (
            Enrolment.objects.select_for_update(of=("self",))
            .filter(pk=found)
            .annotate(db_now=Now())
            .first()
        )
        if row is None:
            raise EnrolmentRefused("invalid_grant", "Unknown device code.")
        update: dict[str, Any] = {"last_polled_at": Now()}
        if row.token_issued_at is not None:
            refusal = EnrolmentRefused("invalid_grant", "This enrolment's token was collected.")
        elif row.status == EnrolmentStatus.DENIED:
            refusal = EnrolmentRefused("access_denied", "An operator refused this enrolment.")
        elif row.db_now >= row.expires_at:
            refusal = EnrolmentRefused("expired_token", "The code expired; enrol again.")
        elif row.last_polled_at is not None and (row.db_now - row.last_polled_at) < timedelta(
            seconds=row.interval / 2
        ):
            update["interval"] = row.interval + SLOW_DOWN_SECONDS
            refusal = EnrolmentRefused(
                "slow_down", f"Poll every {row.interval + SLOW_DOWN_SECONDS} seconds."
            )
        elif row.status == EnrolmentStatus.PENDING:
            refusal = EnrolmentRefused(
                "authorization_pending", "Waiting for an operator to approve the code."
            )
        elif row.device_id is None:  # approved, then the device was deleted
            refusal = EnrolmentRefused("access_denied", "The enrolled device was deleted.")
        else:
            token = credentials.rotate_device_token(row.device)
            update["token_issued_at"] = Now()
            grant = Grant(token, row.device.tenant, row.device.name)
        Enrolment.objects.filter(pk=row.pk).update(**update)
    if refusal is not None:
        raise refusal
    assert grant is not None
    logger.info(
        "enrolment_token_issued enrolment=%s device=%s/%s", found, grant.tenant, grant.device
    )
    return grant


def _refuse_beyond_pending(source: str) -> None:
    """:class:`RateLimited` when ``source`` already has its most enrolments waiting; its
    ``Retry-After`` is when the first of them expires (database clock). A bound, not a lock:
    starts racing each other may pass it by a few."""
    most = int(qprint_settings.ENROLMENT_PENDING_PER_ADDRESS)
    waiting = Enrolment.objects.pending().filter(source_address=source)
    if waiting.count() < most:
        return
    first = waiting.annotate(left=F("expires_at") - Now()).order_by("expires_at").first()
    retry_after = max(1, math.ceil(first.left.total_seconds())) if first is not None else 1
    logger.warning("enrolment_start_refused source=%s waiting=%s", source, most)
    raise RateLimited(
        retry_after,
        f"{most} enrolments from this address are waiting for an operator: approve or deny "
        "them, or wait until they expire.",
    )


def _pending_by_code(user_code: str, source: str, kind: str) -> int:
    code_hash = user_code_hash(user_code if isinstance(user_code, str) else "")
    found = _through_throttle(
        source,
        code_hash,
        kind,
        lambda: (
            Enrolment.objects.pending()
            .filter(user_code_hash=code_hash)
            .values_list("pk", flat=True)
            .first()
        ),
    )
    if found is None:
        raise NotFound(
            "unknown_code", "No pending enrolment has this code (expired, used or mistyped)."
        )
    return found


def _lock_pending(enrolment_id: int) -> Enrolment:
    """The pending enrolment, locked (inside the caller's transaction): two decisions of one code
    queue here, and the second finds it decided."""
    row = Enrolment.objects.select_for_update().pending().filter(pk=enrolment_id).first()
    if row is None:
        raise NotFound("unknown_code", "No pending enrolment has this code (decided meanwhile).")
    return row


def _decide(row: Enrolment, **changes: Any) -> Enrolment:
    Enrolment.objects.filter(pk=row.pk).update(decided_at=Now(), **changes)
    row.refresh_from_db()
    return row


def approve(
    user_code: str,
    *,
    source: str,
    actor: str,
    tenant: str | None = None,
    name: str | None = None,
    device: Device | int | None = None,
    description: str = "",
) -> Enrolment:
    """Approve the pending enrolment of ``user_code``: a new device ``tenant``/``name``, or the
    existing ``device`` re-enrolled (its token rotates now: its old agent is cut off). The agent
    collects the token at its next poll."""
    enrolment_id = _pending_by_code(user_code, source, "enrolment_code")
    with transaction.atomic():
        row = _lock_pending(enrolment_id)  # first: two approvals cannot both make a device
        if device is not None:
            target = Device.objects.filter(pk=getattr(device, "pk", device)).first()
            if target is None:
                raise NotFound("unknown_device", "No such device.")
            if target.kind != DeviceKind.AGENT:
                raise Conflict(
                    "not_an_agent", f"{target} is a {target.kind} printer, not an agent's device."
                )
            credentials.rotate_device_token(target)  # nobody holds this token: cut off now
        else:
            target, _unused = credentials.create_device(
                tenant or "", name or "", description=description
            )
        row = _decide(
            row,
            status=EnrolmentStatus.APPROVED,
            decided_by=actor[:150],
            device=target,
            # The agent has a full expiry to collect its token from now.
            expires_at=Now() + timedelta(seconds=int(qprint_settings.ENROLMENT_EXPIRES_SECONDS)),
        )
    logger.info(
        "enrolment_approved enrolment=%s device=%s by=%s re_enrolled=%s",
        row.pk,
        target,
        actor,
        device is not None,
    )
    return row


def deny(user_code: str, *, source: str, actor: str) -> Enrolment:
    """Refuse the pending enrolment of ``user_code``: its agent is answered ``access_denied``."""
    enrolment_id = _pending_by_code(user_code, source, "enrolment_code")
    with transaction.atomic():
        row = _decide(
            _lock_pending(enrolment_id), status=EnrolmentStatus.DENIED, decided_by=actor[:150]
        )
    logger.info("enrolment_denied enrolment=%s by=%s", row.pk, actor)
    return row


def pending():
    """The enrolments waiting for an operator, newest first (the admin's list)."""
    return Enrolment.objects.pending().order_by("-created_at")


def purge_expired() -> int:
    """Delete the enrolments past their expiry, whatever became of them (the retention task)."""
    count, _ = Enrolment.objects.expired().delete()
    if count:
        logger.info("enrolments_deleted count=%s", count)
    return count
