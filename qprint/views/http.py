"""The HTTP plumbing shared by the device and application APIs.

Every answer of the two APIs is JSON, errors included: ``{"error": code, "message": ...}`` with
the status docs/API.md names. Both APIs authenticate with a bearer secret, never a session, so the
views are CSRF-exempt. A view is written as a plain function of ``(request, principal, **kwargs)``
wrapped by :func:`device_endpoint` or :func:`application_endpoint`, which check the method, the
credentials and map :class:`qprint.core.errors.QPrintError` to its JSON answer; their ``run_async``
form makes an async view that runs the same function on the node's database threads. The views
hold no business rule: that lives in the domain (``qprint.domain``).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

from django.db import DatabaseError, DataError
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from qprint.core import database, errors, executor, inputs
from qprint.core.errors import QPrintError, RateLimited
from qprint.core.text import digits
from qprint.domain import credentials, throttle

logger = logging.getLogger("qprint.http")

BEARER_CHALLENGE = 'Bearer realm="qprint"'
# The largest JSON body other than a document upload (events, settings, printers, commands).
MAX_JSON_BODY_BYTES = 1024 * 1024


class RequestError(QPrintError):
    """A request the transport itself refuses (bad credentials, body, content type)."""

    def __init__(self, code: str, status: int, message: str) -> None:
        super().__init__(code, message)
        self.status = status


def error_response(
    code: str, status: int, message: str, headers: dict[str, str] | None = None
) -> JsonResponse:
    """The one shape of every error answer."""
    response = JsonResponse({"error": code, "message": message}, status=status)
    for name, value in (headers or {}).items():
        response[name] = value
    return response


def unauthorized(message: str) -> RequestError:
    return RequestError("unauthorized", 401, message)


def invalid(field: str, problem: str) -> RequestError:
    """A 422 naming the field at fault."""
    return RequestError("invalid", 422, f"{field}: {problem}")


def answer_error(
    answer: tuple[int, str, str], headers: dict[str, str] | None = None
) -> JsonResponse:
    """:func:`error_response` of a ``(status, code, message)`` (:func:`database.answer_of`)."""
    status, code, message = answer
    return error_response(code, status, message, headers)


def bearer_token(request: HttpRequest) -> str:
    """The secret of ``Authorization: Bearer <secret>``; 401 when absent or malformed."""
    secret = credentials.bearer_secret(request.headers.get("Authorization"))
    if not secret:
        raise unauthorized("An Authorization: Bearer header is required.")
    return secret


def _as_response(exc: QPrintError) -> JsonResponse:
    headers = {"WWW-Authenticate": BEARER_CHALLENGE} if exc.status == 401 else None
    if isinstance(exc, RateLimited):
        headers = {"Retry-After": str(exc.retry_after)}
    return error_response(exc.code, exc.status, exc.message, headers)


def client_address(request: HttpRequest) -> str:
    """The real client's address: the peer, or behind a trusted proxy the rightmost
    ``X-Forwarded-For`` entry that is not one (:func:`throttle.client_address`)."""
    return throttle.client_address(
        request.META.get("REMOTE_ADDR"), request.META.get("HTTP_X_FORWARDED_FOR")
    )


def serve(
    view: Callable[..., HttpResponse],
    authenticate: Callable[[HttpRequest], Any],
    request: HttpRequest,
    args: tuple,
    kwargs: dict,
) -> HttpResponse:
    """Authenticate, run the view and map its refusals (synchronous: on any thread)."""
    try:
        principal = authenticate(request)
        return view(request, principal, *args, **kwargs)
    except QPrintError as exc:
        return _as_response(exc)
    except DataError as exc:
        # The database refused a value the client sent (a number out of range, text it cannot
        # store): the client's error, not an outage. qprint.core.inputs refuses what it knows
        # of first, naming the field; this is the net under it.
        logger.warning("api_data_refused path=%s error=%s", request.path, exc)
        return answer_error(errors.DATA_REFUSED)
    except DatabaseError as exc:
        # Not the client's fault and not final: agents and applications retry a 503.
        # Never a 401/403 here, which would tell an agent to stop and ask a person.
        logger.error("api_database_unavailable path=%s error=%s", request.path, exc, exc_info=True)
        database.log_cause(exc)  # a pool timeout hides the database's own error: name it
        return answer_error(errors.UNAVAILABLE, {"Retry-After": "5"})


def _not_allowed(request: HttpRequest, allowed: tuple[str, ...]) -> HttpResponse | None:
    if request.method in allowed:
        return None
    return error_response(
        "method_not_allowed",
        405,
        f"{request.method} is not allowed here; use {', '.join(allowed)}.",
        {"Allow": ", ".join(allowed)},
    )


def _endpoint(
    methods: tuple[str, ...], authenticate: Callable[[HttpRequest], Any], *, run_async: bool
) -> Callable[[Callable[..., HttpResponse]], Callable[..., Any]]:
    allowed = tuple(m.upper() for m in methods)

    def decorator(view: Callable[..., HttpResponse]) -> Callable[..., Any]:
        if run_async:

            @csrf_exempt
            @functools.wraps(view)
            async def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
                refused = _not_allowed(request, allowed)
                if refused is not None:
                    return refused
                return await executor.http.run(serve, view, authenticate, request, args, kwargs)

            # Served without Django's per-request machinery when the project routes HTTP
            # through qprint.routing.http_application (qprint.views.direct).
            wrapper.direct = True

        else:

            @csrf_exempt
            @functools.wraps(view)
            def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
                refused = _not_allowed(request, allowed)
                if refused is not None:
                    return refused
                return serve(view, authenticate, request, args, kwargs)

        wrapper.allowed_methods = allowed  # read by the OpenAPI test
        return wrapper

    return decorator


def authenticate_device(request: HttpRequest):
    """The enabled device whose token is presented (401 unknown token, 403 ``disabled``)."""
    return credentials.authenticate_device(bearer_token(request), source=client_address(request))


def present_device_token(request: HttpRequest) -> credentials.PresentedToken:
    """The device token presented, not yet looked up (401 when absent or malformed): the
    operation matches it in its own lock and falls back to the one way in when that lock matches
    nothing (:class:`qprint.domain.credentials.PresentedToken`)."""
    return credentials.PresentedToken(bearer_token(request), source=client_address(request))


def authenticate_application(request: HttpRequest):
    """The live application key presented (401 when unknown or revoked)."""
    return credentials.authenticate_application(
        bearer_token(request), source=client_address(request)
    )


def present_application_key(request: HttpRequest):
    """The application key presented, not yet looked up
    (:class:`qprint.domain.credentials.PresentedKey`), for a request that declares a body of at
    most :data:`MAX_JSON_BODY_BYTES` in its ``Content-Length`` (what a deferred device view reads
    before its token is known); any other request's key (no length, a chunked body, a larger
    one) is looked up first, so a client without a key never makes a node read a large body.
    401 when absent or malformed."""
    declared = request.headers.get("Content-Length", "")
    small = (
        digits(declared)
        and len(declared) <= len(str(MAX_JSON_BODY_BYTES))
        and int(declared) <= MAX_JSON_BODY_BYTES
    )
    if not small:
        return authenticate_application(request)
    return credentials.PresentedKey(bearer_token(request), source=client_address(request))


def device_endpoint(*methods: str, run_async: bool = False, deferred: bool = False):
    """A view of the device API: ``view(request, device, **url_kwargs)``.

    ``run_async=True`` makes it an async view whose work (authentication included) runs on the
    node's HTTP database threads (:data:`qprint.core.executor.http`): the hot endpoints, so that a
    request pays neither a thread of its own for the view nor a new database connection. The
    answer is the same either way: the same function runs.

    ``deferred=True``: the view is handed the token presented
    (:class:`qprint.domain.credentials.PresentedToken`, from :func:`present_device_token`) in
    place of the device, for a domain operation that matches it in its own lock (the claim, the
    event): the same answers as the lookup's (401, 429, 403), without its statement.
    """
    authenticate = present_device_token if deferred else authenticate_device
    return _endpoint(methods, authenticate, run_async=run_async)


def application_endpoint(*methods: str, run_async: bool = False, deferred: bool = False):
    """A view of the application API: ``view(request, key, **url_kwargs)`` (``run_async`` as
    for :func:`device_endpoint`). ``deferred=True``: ``key`` may be the key presented, not yet
    looked up (:func:`present_application_key`), for a domain operation that matches it in its
    own statement (the submission); the view looks it up itself where it needs the key."""
    authenticate = present_application_key if deferred else authenticate_application
    return _endpoint(methods, authenticate, run_async=run_async)


def application_key(key) -> Any:
    """The key of a ``deferred`` application view, looked up now when it was only presented."""
    if isinstance(key, credentials.PresentedKey):
        return key.authenticate()
    return key


def no_credentials(request: HttpRequest) -> None:
    """The "authentication" of a view that takes none (enrolment: the code is the credential)."""
    return None


def public_endpoint(*methods: str):
    """A view that needs no credentials: ``view(request, None, **url_kwargs)``, with the same
    method check and error answers as the authenticated ones."""
    return _endpoint(methods, no_credentials, run_async=False)


def read_limited(request: HttpRequest, limit: int, too_large: RequestError) -> bytes:
    """The request body, refused with ``too_large`` before it is read when it cannot fit.

    ``Content-Length`` is checked first, then the read itself is bounded (a chunked body has no
    length). ``request.body`` is never used: it would apply Django's
    ``DATA_UPLOAD_MAX_MEMORY_SIZE`` (2.5 MiB by default) to a legitimate document upload.
    """
    try:
        declared = int(request.headers.get("Content-Length") or 0)
    except ValueError:
        raise RequestError("invalid", 400, "Content-Length is not a number.") from None
    if declared > limit:
        raise too_large
    data = request.read(limit + 1)
    if len(data) > limit:
        raise too_large
    return data


def media_type(request: HttpRequest) -> str:
    return (request.content_type or "").split(";")[0].strip().lower()


def read_json_body(request: HttpRequest, limit: int) -> bytes:
    """The raw body of a JSON request (415 another content type, 413 longer than ``limit``)."""
    if media_type(request) != "application/json":
        raise RequestError(
            "unsupported_media_type", 415, "The request body must be application/json."
        )
    return read_limited(
        request,
        limit,
        RequestError("request_too_large", 413, f"The request body exceeds {limit} bytes."),
    )


def read_json_object(request: HttpRequest, limit: int = MAX_JSON_BODY_BYTES) -> dict[str, Any]:
    """The JSON object in the body (415 another content type, 413 too long, 422 not an object)."""
    body = inputs.parse_json("body", read_json_body(request, limit) or b"{}")
    if not isinstance(body, dict):
        raise RequestError("invalid", 422, "body: a JSON object is required")
    return body


def read_presented_json_value(request: HttpRequest, presented: credentials.PresentedToken) -> Any:
    """:func:`read_json_value` for a ``deferred`` device view: a body it refuses (415, 413,
    422) is answered after the device's standing (401, 429, 403), as when the token was looked up
    before the view ran."""
    try:
        return read_json_value(request)
    except QPrintError:
        presented.authenticate()
        raise


def read_json_value(request: HttpRequest, limit: int = MAX_JSON_BODY_BYTES) -> Any:
    """Any JSON value in the body (used where the body is a list, e.g. the printers)."""
    return inputs.parse_json("body", read_json_body(request, limit) or b"null")


FORM_MEDIA_TYPES = ("multipart/form-data", "application/x-www-form-urlencoded")


def read_optional_options(request: HttpRequest) -> dict[str, Any]:
    """Optional options of an action (e.g. ``{"force": true}``): a JSON object, form fields, or
    no body at all (``{}``)."""
    kind = media_type(request)
    if kind == "application/json":
        return read_json_object(request)
    if kind in FORM_MEDIA_TYPES:
        return request.POST.dict()
    if request.read(1):
        raise RequestError(
            "unsupported_media_type", 415, "The request body must be application/json."
        )
    return {}


def json_response(data: Any, status: int = 200) -> JsonResponse:
    return JsonResponse(data, status=status, safe=False)
