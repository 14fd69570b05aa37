"""The errors of qprint's domain, each with its error code (docs/API.md) and its HTTP status.

Transports turn them into their own shapes: the HTTP views answer
``{"error": err.code, "message": err.message}`` with ``err.status``; commands raise
``CommandError(err.message)``. The domain never imports a transport to do so. A database error
has its answer here too (:func:`qprint.core.database.answer_of`), the same on every transport.
Imports nothing (the device session's rooms import it).
"""

#: The answer to a request the database could not serve: not the client's fault, and not final.
UNAVAILABLE = (503, "unavailable", "The database could not answer; retry shortly.")
#: The answer to a request with a value the database would not store: the client's error.
DATA_REFUSED = (422, "invalid", "The database refused a value of the request.")


class QPrintError(Exception):
    """Base of every refusal the domain answers with. ``code`` is stable and machine-readable."""

    code: str = "error"
    status: int = 400
    default_message: str = "The request was refused."

    def __init__(self, code: str | None = None, message: str | None = None) -> None:
        if code is not None:
            self.code = code
        self.message = message or self.default_message
        super().__init__(self.message)

    def as_dict(self) -> dict[str, str]:
        return {"error": self.code, "message": self.message}

    def __repr__(self) -> str:
        return f"{type(self).__name__}(code={self.code!r}, message={self.message!r})"


class Invalid(QPrintError):
    """The request body is malformed; the message names the field (HTTP 422)."""

    code = "invalid"
    status = 422
    default_message = "The request is invalid."


class NotFound(QPrintError):
    """No such object in the caller's tenant (HTTP 404): ``not_found``, ``unknown_device``."""

    code = "not_found"
    status = 404
    default_message = "Not found."


class Conflict(QPrintError):
    """The request conflicts with the object's state (HTTP 409).

    Codes: ``idempotency_conflict``, ``already_reprinted``, ``job_final``, ``not_an_agent``,
    ``not_cloudprnt``.
    """

    code = "conflict"
    status = 409
    default_message = "The request conflicts with the current state."


class GateClosed(Conflict):
    """The device may not claim now (HTTP 409).

    Codes: ``not_connected``, ``not_ready``, ``stale_control``, ``stale_settings``, ``paused``.
    """

    code = "not_connected"


class EventRejected(Conflict):
    """A device event was refused (HTTP 409).

    Codes: ``event_conflict``, ``backwards``, ``job_cancelled``, ``stale_claim``.
    """

    code = "event_conflict"


class Unauthorized(QPrintError):
    """The device's token no longer matches (revoked or rotated): the HTTP API's 401."""

    code = "unauthorized"
    status = 401
    default_message = "Unknown or revoked device token."


class Disabled(QPrintError):
    """The device is disabled (HTTP 403)."""

    code = "disabled"
    status = 403
    default_message = "The device is disabled."


class DocumentTooLarge(QPrintError):
    """The document is over ``QPRINT["MAX_DOCUMENT_BYTES"]`` (HTTP 413)."""

    code = "document_too_large"
    status = 413
    default_message = "The document is too large."


class UnsupportedContentType(QPrintError):
    """The content type is not one qprint delivers (HTTP 415)."""

    code = "unsupported_content_type"
    status = 415
    default_message = "The content type is not supported."


class RateLimited(QPrintError):
    """Too many failed authentications from this address or for this credential (HTTP 429);
    ``retry_after`` is the number of seconds to wait (the ``Retry-After`` header)."""

    code = "rate_limited"
    status = 429
    default_message = "Too many failed authentications; retry later."

    def __init__(self, retry_after: int, message: str | None = None) -> None:
        super().__init__(None, message)
        self.retry_after = retry_after


class EnrolmentRefused(QPrintError):
    """An enrolment's token cannot be handed out (yet): HTTP 400 with the OAuth device-grant
    error codes (docs/API.md, "Enrolment"): ``authorization_pending``, ``slow_down``,
    ``expired_token``, ``access_denied``, ``invalid_grant``."""

    code = "invalid_grant"
    status = 400
    default_message = "The enrolment cannot be completed."
