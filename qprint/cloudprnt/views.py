"""The CloudPRNT endpoint (``cloudprnt/`` under qprint's URLs): a thin transport of HTTP.

One URL, as Star printers use it (docs/CLOUDPRNT.md):

- ``POST`` - the poll: 200 ``{"jobReady": ...}``;
- ``GET ?mac=&type=&token=`` - the job's document in the media type asked for;
- ``DELETE ?mac=&code=&token=`` (or ``GET ?delete&mac=&code=&token=``) - the confirmation.

HTTP Basic authentication: user name the device's name, password its token (401 with
``WWW-Authenticate: Basic`` otherwise), through the throttle of failed authentications; the poll
of a live printer is authenticated inside its one statement (:func:`_poll`), and whatever that
does not match is authenticated as every request is. The view
is async and its work runs on the node's HTTP database threads, so a burst of polls waits for no
thread of its own. Every answer says it must not be cached (:data:`NO_CACHE`). The rules are the
domain's (:mod:`qprint.domain.cloudprnt`); the wire is :mod:`qprint.core.cloudprnt_protocol`.
"""

from __future__ import annotations

import base64
import binascii
import time

from django.http import HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt

from qprint.core import cloudprnt_protocol as protocol
from qprint.core import executor
from qprint.core.conf import qprint_settings
from qprint.core.errors import Unauthorized
from qprint.domain import cloudprnt, credentials
from qprint.metrics import instruments
from qprint.models import Device, DeviceKind
from qprint.views.http import (
    RequestError,
    client_address,
    error_response,
    json_response,
    no_credentials,
    read_limited,
    serve,
)

BASIC_CHALLENGE = 'Basic realm="qprint", charset="UTF-8"'
ALLOWED = ("POST", "GET", "DELETE")
#: A poll's answer changes with every job: no cache or proxy in front of the URL may keep one.
NO_CACHE = {
    "Cache-Control": "no-store, no-cache, must-revalidate, private, max-age=0",
    "Pragma": "no-cache",
    "Expires": "0",
    "Vary": "Authorization",
}


def _unauthorized(message: str) -> RequestError:
    return RequestError("unauthorized", 401, message)


def basic_credentials(request: HttpRequest) -> tuple[str, str]:
    """The user name and password of ``Authorization: Basic``; 401 when absent or malformed."""
    scheme, _, value = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "basic" or not value.strip():
        raise _unauthorized(
            "HTTP Basic authentication is required (user: the device's name, password: its token)."
        )
    try:
        decoded = base64.b64decode(value.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise _unauthorized(
            "The Basic credentials are not valid base64 of user:password."
        ) from None
    user, sep, password = decoded.partition(":")
    if not sep or not password:
        raise _unauthorized("The Basic credentials carry no password (the device's token).")
    return user, password


def authenticate(request: HttpRequest) -> Device:
    """The enabled CloudPRNT device named and authenticated by the Basic credentials, through the
    one way in for a device (:func:`credentials.authenticate_device`: the throttle, 401 unknown,
    403 disabled)."""
    user, token = basic_credentials(request)
    try:
        device = credentials.authenticate_device(
            token, source=client_address(request), kind=DeviceKind.CLOUDPRNT
        )
    except Unauthorized:
        raise _unauthorized("Unknown device name or token.") from None
    if user and user != device.name:
        raise _unauthorized("Unknown device name or token.")
    return device


def _request_kind(request: HttpRequest) -> str:
    if request.method == "POST":
        return "poll"
    if request.method == "DELETE" or "delete" in request.GET:
        return "confirm"
    return "job"


def _mac(request: HttpRequest) -> str:
    try:
        return protocol.normalize_mac(request.GET.get("mac", ""))
    except protocol.ProtocolError as exc:
        raise RequestError("invalid", 400, exc.message.replace("printerMAC", "mac")) from None


def _read_poll(request: HttpRequest) -> protocol.Poll:
    """The poll's body, checked: 413 too long (before it is read), 400 not Star's JSON."""
    limit = qprint_settings.CLOUDPRNT_MAX_POLL_BYTES
    body = read_limited(
        request,
        limit,
        RequestError("request_too_large", 413, f"A poll may not exceed {limit} bytes."),
    )
    try:
        return protocol.parse_poll(body)
    except protocol.ProtocolError as exc:
        raise RequestError("invalid_poll", 400, exc.message) from None


def _poll_response(answer: cloudprnt.PollAnswer) -> HttpResponse:
    response = json_response(
        protocol.poll_answer(
            job_token=answer.job_token, media_types=answer.media_types, ask=answer.ask
        )
    )
    response.qprint_answer = "job" if answer.job_token else "none"
    return response


def _poll(request: HttpRequest) -> HttpResponse:
    """The poll. The common case is one statement, its authentication included
    (:func:`cloudprnt.poll_live`: the live printer of the device the Basic credentials name,
    from its bound MAC). What that does not match (wrong credentials, a disabled device, another
    MAC, the first poll, a lease run out) and a body that is not a poll take the way of every
    request: :func:`authenticate` first (the throttle, 401/403/429), then the body's errors and
    :func:`cloudprnt.poll`."""
    try:
        user, token = basic_credentials(request)
        report = _read_poll(request)
    except RequestError as refused:
        # The answer of any request: the authentication's refusal first, then this one.
        return serve(_raise(refused), authenticate, request, (), {})
    answered = serve(lambda r, _: _live_poll(token, user, report), no_credentials, request, (), {})
    if answered is not None:
        return answered
    return serve(
        lambda r, device: _poll_response(cloudprnt.poll(device, report)),
        authenticate,
        request,
        (),
        {},
    )


def _live_poll(token: str, user: str, report: protocol.Poll) -> HttpResponse | None:
    answer = cloudprnt.poll_live(token, user, report)
    return None if answer is None else _poll_response(answer)


def _raise(refused: RequestError):
    def view(request: HttpRequest, device: Device) -> HttpResponse:
        raise refused

    return view


def _job(request: HttpRequest, device: Device) -> HttpResponse:
    fetched = cloudprnt.fetch(
        device, _mac(request), request.GET.get("token") or None, request.GET.get("type", "")
    )
    response = HttpResponse(fetched.content, content_type=fetched.content_type)
    response["Content-Length"] = str(len(fetched.content))
    for name, value in protocol.job_headers(fetched.options).items():
        response[name] = value
    return response


def _confirm(request: HttpRequest, device: Device) -> HttpResponse:
    said = protocol.confirmation(request.GET.get("code", ""))
    confirmed = cloudprnt.confirm(device, _mac(request), request.GET.get("token") or None, said)
    return json_response({"status": confirmed.status, "recorded": confirmed.recorded})


_VIEWS = {"job": _job, "confirm": _confirm}


def _answer(request: HttpRequest, kind: str) -> HttpResponse:
    """Authenticate, run the request's view and map refusals (on a database thread)."""
    if kind == "poll":
        response = _poll(request)
    else:
        response = serve(lambda r, device: _VIEWS[kind](r, device), authenticate, request, (), {})
    if response.status_code == 401:
        response["WWW-Authenticate"] = BASIC_CHALLENGE
    return response


@csrf_exempt
async def endpoint(request: HttpRequest) -> HttpResponse:
    """The CloudPRNT URL: the poll, the job and its confirmation."""
    started = time.perf_counter()
    if request.method not in ALLOWED:
        response = error_response(
            "method_not_allowed",
            405,
            f"{request.method} is not allowed here; use {', '.join(ALLOWED)}.",
            {"Allow": ", ".join(ALLOWED)},
        )
        kind = "other"
    else:
        kind = _request_kind(request)
        response = await executor.http.run(_answer, request, kind)
    for name, value in NO_CACHE.items():
        response[name] = value
    answer = getattr(response, "qprint_answer", None)
    if answer is None:
        answer = "ok" if response.status_code < 400 else _error_code(response)
    instruments.cloudprnt_answered(kind, started, response.status_code, answer)
    return response


def _error_code(response: HttpResponse) -> str:
    import json

    try:
        return str(json.loads(response.content).get("error", "error"))[:40]
    except (ValueError, AttributeError):
        return "error"


endpoint.allowed_methods = ALLOWED  # read by the OpenAPI test
