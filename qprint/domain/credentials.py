"""Device tokens and application keys: made, rotated and revoked here, stored only as a hash,
looked up by hash.

The secrets are 32 random bytes (256 bits) from ``secrets``. A slow password KDF (PBKDF2, argon2)
defends low-entropy human passwords against guessing; against a 256-bit random secret a single
SHA-256 is already beyond brute force, and it lets every request find its credential with one
indexed lookup instead of a KDF run per request. The stored hash is compared again with
``hmac.compare_digest`` so the final check does not leak timing.

The one way in: :func:`authenticate_device` (the HTTP API, the socket upgrade, any new transport)
and :func:`authenticate_application` take the presented secret (read by :func:`bearer_secret`)
and the real client address, and answer the principal or the refusal (401, 403, 429). One
statement looks a credential up elsewhere: the CloudPRNT poll of a live printer matches the hash
of :func:`hash_secret` inside its lease renewal (``qprint.domain.connection.poll_live``) and
compares the stored hash with :func:`require_token`; every poll it does not match comes in here.
Likewise the claim and the event of the device HTTP API take the token as presented
(:class:`PresentedToken`), match its hash in their own lock (``qprint.domain.claim``,
``qprint.domain.events``) and check the locked row with :meth:`PresentedToken.require`; every
request their lock does not match comes in here (:meth:`PresentedToken.authenticate`). An
application's job submission matches its key in the statement that reads the device
(:class:`PresentedKey`); a key it does not match comes in here (:meth:`PresentedKey.authenticate`).
"""

import functools
import hashlib
import hmac
import logging
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import (
    BooleanField,
    CharField,
    ExpressionWrapper,
    IntegerField,
    Q,
    Subquery,
)
from django.db.models.functions import Now

from qprint.core import inputs
from qprint.core.errors import Conflict, Disabled, Invalid, NotFound, Unauthorized
from qprint.core.prepared import Param, PreparedQuery
from qprint.core.text import digits
from qprint.domain import throttle
from qprint.domain.wakeups import wake_after_commit
from qprint.models import ApplicationKey, Device, DeviceKind

logger = logging.getLogger("qprint.credentials")

SECRET_BYTES = 32
#: ``last_used_at`` is written at most this often per key.
LAST_USED_RESOLUTION = timedelta(minutes=1)


def new_secret() -> str:
    """A fresh secret: 32 random bytes, URL-safe base64 (43 characters)."""
    return secrets.token_urlsafe(SECRET_BYTES)


def hash_secret(secret: str) -> str:
    """The SHA-256 hex digest stored in place of ``secret``. A presented secret is hashed
    whatever it holds: a lone surrogate (a JSON ``"\\ud800"``), which no secret made here
    contains, gives a digest that matches nothing."""
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).hexdigest()


_DEVICE_BY_TOKEN = PreparedQuery(
    lambda: Device.objects.filter(token_hash=Param("digest", CharField()))[:1]
)


def _use_is_stale() -> ExpressionWrapper:
    """Whether a key's ``last_used_at`` is to be written now (at most once a
    :data:`LAST_USED_RESOLUTION`), judged on the database clock."""
    return ExpressionWrapper(
        Q(last_used_at__isnull=True) | Q(last_used_at__lt=Now() - LAST_USED_RESOLUTION),
        output_field=BooleanField(),
    )


_KEY_BY_SECRET = PreparedQuery(
    lambda: ApplicationKey.objects.filter(
        key_hash=Param("digest", CharField()), revoked=False
    ).annotate(use_is_stale=_use_is_stale())[:1]
)


def bearer_secret(header: str | None) -> str:
    """The secret of an ``Authorization: Bearer <secret>`` header value ("" when the header is
    absent or another scheme): the one parser of the HTTP APIs and the socket upgrade."""
    scheme, _, secret = (header or "").strip().partition(" ")
    return secret.strip() if scheme.lower() == "bearer" else ""


def device_for_token(token: str, *, kind: str = DeviceKind.AGENT) -> Device | None:
    """The device of ``kind`` this token belongs to, enabled or not (:func:`authenticate_device`
    says 403 when disabled). A token of a device of another kind is answered as an unknown one: a
    CloudPRNT printer's token opens no socket and an agent's token polls no CloudPRNT endpoint.
    No throttle: use :func:`authenticate_device` for a presented secret."""
    if not token:
        return None
    digest = hash_secret(token)
    device = _DEVICE_BY_TOKEN.first(digest=digest)
    if device is None or not hmac.compare_digest(device.token_hash, digest):
        return None
    if device.kind != kind:
        return None
    return device


_DEVICE_BY_ID_AND_TOKEN = PreparedQuery(
    lambda: Device.objects.filter(
        pk=Param("device", IntegerField()), token_hash=Param("digest", CharField())
    )[:1]
)


def require_token(stored_hash: str | None, enabled: bool | None, token_hash: str) -> None:
    """A device read by the statement of its operation (a socket's, by its id; an HTTP request's,
    by the hash of the token it presents: :class:`PresentedToken`) holds the token hashed
    ``token_hash`` (:class:`~qprint.core.errors.Unauthorized`, 401, otherwise) and is enabled
    (:class:`~qprint.core.errors.Disabled`, 403): what :func:`authenticate_device` would answer
    now."""
    if stored_hash is None or not hmac.compare_digest(stored_hash, token_hash):
        raise Unauthorized()
    if not enabled:
        raise Disabled()


def no_device(token_hash: str | None) -> NotFound | Unauthorized:
    """The answer for a device that is gone, its row read by an operation: to a socket (which
    passes its ``token_hash``), what HTTP answers its token now (401: it names no device); to
    host code, ``unknown_device``."""
    if token_hash is not None:
        return Unauthorized()
    return NotFound("unknown_device", "No such device.")


def still_held(device_id: int, token_hash: str) -> Device:
    """Device ``device_id``, read on its own, when it still holds the token hashed ``token_hash``
    and is enabled (:func:`require_token`'s answers otherwise)."""
    device = device_with_token_hash(device_id, token_hash)
    if device is None:
        raise Unauthorized()
    require_token(device.token_hash, device.enabled, token_hash)
    return device


def device_with_token_hash(device_id: int, token_hash: str) -> Device | None:
    """Device ``device_id`` while its token is still the one hashed ``token_hash`` (a socket's
    device, checked again at each operation it sends), else ``None``."""
    return _DEVICE_BY_ID_AND_TOKEN.first(device=device_id, digest=token_hash)


def authenticate(source: str, secret: str, lookup: Callable[[str], Any], kind: str) -> Any:
    """The principal ``lookup(secret)`` finds, or ``None`` for an unknown secret, counted by the
    throttle of failed authentications (:mod:`qprint.domain.throttle`) against ``source``, the
    real client address. A secret that is right is never refused here, whatever others did from
    its address or with its prefix; a wrong one is refused with
    :class:`~qprint.core.errors.RateLimited` once its address or its prefix failed too often."""
    principal = lookup(secret)
    if principal is not None:
        return principal
    refusal = throttle.refusal(source, secret)
    if refusal is not None:
        raise refusal
    throttle.record_failure(source, secret, kind)
    return None


def authenticate_device(secret: str, *, source: str, kind: str = DeviceKind.AGENT) -> Device:
    """The one way in for a device (HTTP API, socket upgrade): the enabled device holding
    ``secret``, compared in constant time. Raises :class:`~qprint.core.errors.Unauthorized`
    (401) for an unknown or revoked token, :class:`~qprint.core.errors.RateLimited` (429) for one
    from an address or with a prefix that failed too often, :class:`~qprint.core.errors.Disabled`
    (403) for a device that is disabled. ``source``: the real client address
    (:func:`throttle.client_address`); ``kind``: the transport's kind of device (a token of
    another kind is an unknown token: an agent's opens no CloudPRNT poll and vice versa)."""
    lookup = functools.partial(device_for_token, kind=kind)
    device = authenticate(source, secret, lookup, "device" if kind == DeviceKind.AGENT else kind)
    if device is None:
        raise Unauthorized()
    if not device.enabled:
        raise Disabled()
    return device


@dataclass(frozen=True)
class PresentedToken:
    """A device's secret as a transport received it, not yet looked up (the device HTTP API's
    claim and event): the operation matches :attr:`token_hash` in its own lock, of a device of
    ``kind`` only, and checks the row it locked with :meth:`require`. When its lock matched no
    row, the operation comes in the one way in, :meth:`authenticate` (the throttle, 401, 429,
    403), outside its transaction so that a failure's count commits; a right token it did not
    match for another reason is then served by the device's id, as any other request.
    ``source``: the real client address (:func:`throttle.client_address`)."""

    secret: str = field(repr=False)
    source: str
    kind: str = DeviceKind.AGENT
    token_hash: str = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "token_hash", hash_secret(self.secret))

    def require(self, stored_hash: str | None, enabled: bool | None) -> None:
        """The row the operation's lock matched by :attr:`token_hash` holds it (compared in
        constant time, 401 otherwise) and is enabled (403 ``disabled``): :func:`require_token`."""
        require_token(stored_hash, enabled, self.token_hash)

    def authenticate(self) -> Device:
        """The one way in (:func:`authenticate_device`), for a token the lock did not match."""
        return authenticate_device(self.secret, source=self.source, kind=self.kind)


def answer_standing(device: int | PresentedToken, token_hash: str | None = None) -> None:
    """Before a request's content is refused (422, 404): the device's standing, as the one way in
    answers it (401, 429, 403). The token an HTTP request presents is authenticated; a socket's
    device (its id) must still hold the token hashed ``token_hash`` and be enabled; a device
    already authenticated (an id without ``token_hash``) has nothing left to answer."""
    if isinstance(device, PresentedToken):
        device.authenticate()
    elif token_hash is not None:
        still_held(device, token_hash)


def jobs_device(*, by_token: bool) -> dict[str, Param]:
    """The filter of a job query on the device whose job it must be: by the device's id
    (placeholder ``device``), or (``by_token``) by the hash of the token a request presents and the
    transport's kind (``digest`` and ``kind``, what :class:`PresentedToken` holds), so that the
    operation's own statement matches the token."""
    if by_token:
        return {
            "device__token_hash": Param("digest", CharField()),
            "device__kind": Param("kind", CharField()),
        }
    return {"device_id": Param("device", IntegerField())}


def authenticate_application(secret: str, *, source: str) -> ApplicationKey:
    """The live application key ``secret`` is, as :func:`authenticate_device` for a device
    (401 unknown or revoked, 429 throttled)."""
    key = authenticate(source, secret, key_for_secret, "application")
    if key is None:
        raise Unauthorized(message="Unknown or revoked application key.")
    return key


def key_for_secret(secret: str) -> ApplicationKey | None:
    """The live (not revoked) application key for ``secret``; records when it was last used.

    ``last_used_at`` is written at most once a minute per key (judged in the same SELECT, on the
    database clock), so a busy key does not turn every request into a write.
    """
    if not secret:
        return None
    digest = hash_secret(secret)
    key = _KEY_BY_SECRET.first(digest=digest)
    if key is None or not hmac.compare_digest(key.key_hash, digest):
        return None
    if key.use_is_stale:
        record_use(key.pk)
    return key


def record_use(key_id: int) -> None:
    """Write the key's ``last_used_at`` (when its statement judged it stale)."""
    ApplicationKey.objects.filter(pk=key_id).update(last_used_at=Now())


def submitter(key_name: str) -> str:
    """How a job submitted with the key named ``key_name`` records who submitted it."""
    return f"key:{key_name}"


def presented_key_columns(digest: Any) -> dict[str, Any]:
    """The annotations with which another statement matches the live application key hashed
    ``digest`` (a :class:`~qprint.core.prepared.Param`) itself: its tenant (``key_tenant``),
    id, name and hash, and whether its ``last_used_at`` is stale; NULL when no live key has that
    hash (:class:`PresentedKey`)."""
    # One row at most (``key_hash`` is unique): no ordering to sort it by.
    live = ApplicationKey.objects.filter(key_hash=digest, revoked=False).order_by()
    return {
        "key_tenant": Subquery(live.values("tenant")[:1]),
        "key_id": Subquery(live.values("pk")[:1]),
        "key_name": Subquery(live.values("name")[:1]),
        "key_hash": Subquery(live.values("key_hash")[:1]),
        "key_use_is_stale": Subquery(live.annotate(stale=_use_is_stale()).values("stale")[:1]),
    }


@dataclass(frozen=True)
class PresentedKey:
    """An application key as a request presents it, not yet looked up (a job submission): the
    submission matches :attr:`key_hash` in its own statement (``presented_key_columns``, with the
    device it names in the key's tenant) and checks what it matched with :meth:`require`. When that
    statement matched nothing (an unknown or revoked key, or no such device), and whenever the
    request is refused before that statement runs, the key comes in the one way in,
    :meth:`authenticate` (the throttle, 401, 429), so the answers and their order are those of a
    key looked up first. ``source``: the real client address (:func:`throttle.client_address`)."""

    secret: str = field(repr=False)
    source: str
    key_hash: str = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "key_hash", hash_secret(self.secret))

    def require(self, stored_hash: str | None) -> None:
        """The key the statement matched by :attr:`key_hash` holds it (constant time; 401)."""
        if stored_hash is None or not hmac.compare_digest(stored_hash, self.key_hash):
            raise Unauthorized(message="Unknown or revoked application key.")

    def authenticate(self) -> ApplicationKey:
        """The one way in (:func:`authenticate_application`)."""
        return authenticate_application(self.secret, source=self.source)


def device_id_of(device: Device | int) -> int:
    """The id of ``device`` (a Device, or its id, also as the digits of a URL): anything else
    names no device (:class:`NotFound`, ``unknown_device``), as host code gets for an id no row
    has."""
    if isinstance(device, Device):
        return device.pk
    if isinstance(device, int) and not isinstance(device, bool) and 0 < device < 2**63:
        return device
    if isinstance(device, str) and digits(device) and len(device) < 19:
        return int(device)
    raise NotFound("unknown_device", f"No device {str(device)[:150]!r}: give a Device or its id.")


def create_device(
    tenant: str, name: str, *, description: str = "", kind: str = DeviceKind.AGENT
) -> tuple[Device, str]:
    """Register a device of ``kind`` (``agent``, ``cloudprnt``: fixed from then on); returns it
    and its token (shown once, only its hash is stored)."""
    tenant = inputs.text("tenant", tenant, inputs.TENANT_MAX_LENGTH)
    name = inputs.text("name", name, 150)
    if not tenant or not name:
        raise Invalid(message="A device needs a tenant and a name.")
    inputs.check_device_name("name", name)
    if kind not in DeviceKind.values:
        raise Invalid(message=f"kind: must be one of {', '.join(DeviceKind.values)}.")
    description = inputs.text("description", description, 10000)
    token = new_secret()
    try:
        with transaction.atomic():
            device = Device.objects.create(
                tenant=tenant,
                name=name,
                description=description,
                token_hash=hash_secret(token),
                kind=kind,
            )
    except IntegrityError:
        raise Conflict("device_exists", f"Device {tenant}/{name} already exists.") from None
    logger.info("device_created device=%s kind=%s", device, kind)
    return device, token


def rotate_device_token(device: Device | int) -> str:
    """Give the device a new token; the old one stops working at once (its socket is told)."""
    device_id = device_id_of(device)
    token = new_secret()
    with transaction.atomic():
        target = Device.objects.select_for_update(no_key=True).filter(pk=device_id).first()
        if target is None:
            raise NotFound("unknown_device", "No such device.")
        Device.objects.filter(pk=device_id).update(token_hash=hash_secret(token))
        wake_after_commit(target.tenant, target.pk, "token_rotated")
    logger.info("device_token_rotated device=%s", target)
    return token


def create_application_key(tenant: str, name: str) -> tuple[ApplicationKey, str]:
    """Create an application key for ``tenant``; returns it and the secret (shown once)."""
    tenant = inputs.text("tenant", tenant, inputs.TENANT_MAX_LENGTH)
    name = inputs.text("name", name, 150)
    if not tenant or not name:
        raise Invalid(message="A key needs a tenant and a name.")
    secret = new_secret()
    try:
        with transaction.atomic():
            key = ApplicationKey.objects.create(
                tenant=tenant, name=name, key_hash=hash_secret(secret)
            )
    except IntegrityError:
        raise Conflict("key_exists", f"A live key {tenant}/{name} already exists.") from None
    logger.info("appkey_created tenant=%s name=%s", tenant, name)
    return key, secret


def revoke_application_key(tenant: str, name: str) -> ApplicationKey:
    """Revoke the live key ``name`` of ``tenant``; it stops working at once."""
    if inputs.no_row_has_tenant(tenant) or inputs.lookup_name("name", name) is None:
        raise NotFound("not_found", f"No live key named {tenant!r:.100}/{name!r:.150}.")
    with transaction.atomic():
        key = (
            ApplicationKey.objects.select_for_update()
            .filter(tenant=tenant, name=name, revoked=False)
            .first()
        )
        if key is None:
            raise NotFound("not_found", f"No live key named {tenant}/{name}.")
        ApplicationKey.objects.filter(pk=key.pk).update(revoked=True)
        key.revoked = True
    logger.info("appkey_revoked tenant=%s name=%s", tenant, name)
    return key
