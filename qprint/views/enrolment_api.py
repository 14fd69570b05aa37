"""Enrolment by code, the agent's side (docs/API.md, "Enrolment"; after RFC 8628).

No credentials: the device code is the secret, and the domain looks it up through the throttle
of failed authentications (:mod:`qprint.domain.enrolment`). Refusals of the token poll are the
OAuth device grant's: HTTP 400 ``{"error": "authorization_pending", "message": ...}``.
"""

from __future__ import annotations

from urllib.parse import urlencode

from django.http import HttpRequest, HttpResponse
from django.urls import NoReverseMatch, reverse

from qprint.core.conf import qprint_settings
from qprint.domain import enrolment
from qprint.views.http import client_address, json_response, public_endpoint, read_json_object

#: The admin's "Enrol a device" page (qprint's admin registers it under this name).
ENROL_PAGE = "admin:qprint_enrolment_changelist"


def verification_uri(request: HttpRequest) -> str:
    configured = qprint_settings.ENROLMENT_VERIFICATION_URI
    if configured:
        return configured
    try:
        return request.build_absolute_uri(reverse(ENROL_PAGE))
    except NoReverseMatch:  # the host does not mount the admin: tell the way to its root
        return request.build_absolute_uri("/")


@public_endpoint("POST")
def enrollments(request: HttpRequest, _nobody: None) -> HttpResponse:
    """201 ``{device_code, user_code, verification_uri, verification_uri_complete, expires_in,
    interval}``."""
    body = read_json_object(request, limit=16 * 1024)
    started = enrolment.start(body.get("agent_info"), source=client_address(request))
    uri = verification_uri(request)
    return json_response(
        {
            "device_code": started.device_code,
            "user_code": started.user_code,
            "verification_uri": uri,
            "verification_uri_complete": f"{uri}?{urlencode({'code': started.user_code})}",
            "expires_in": started.expires_in,
            "interval": started.interval,
        },
        status=201,
    )


@public_endpoint("POST")
def enrollment_token(request: HttpRequest, _nobody: None) -> HttpResponse:
    """200 ``{token, tenant, device}`` once; 400 ``authorization_pending`` / ``slow_down`` /
    ``expired_token`` / ``access_denied`` / ``invalid_grant``; 429 throttled."""
    body = read_json_object(request, limit=16 * 1024)
    grant = enrolment.poll(body.get("device_code"), source=client_address(request))
    response = json_response({"token": grant.token, "tenant": grant.tenant, "device": grant.device})
    response["Cache-Control"] = "no-store"
    return response
