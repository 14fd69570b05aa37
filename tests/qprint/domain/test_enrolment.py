"""Enrolment by code (docs/AGENT.md, "Enrolling by code"): the codes, the poll's answers, single
use, expiry, the throttle on guessed codes, re-enrolment rotating a device's token, retention,
and that neither code nor the token is stored or logged."""

from __future__ import annotations

import logging
import re

import pytest
from django.test import override_settings
from django.urls import reverse

from qprint.core.errors import Conflict, EnrolmentRefused, NotFound, RateLimited
from qprint.domain import credentials, enrolment, maintenance
from qprint.models import Device, Enrolment, EnrolmentStatus
from tests.processes import wait_until
from tests.qprint.domain.test_credentials_security import every_stored_text

pytestmark = pytest.mark.django_db

INFO = {"hostname": "shop-7", "platform": "Linux-6.1-aarch64", "version": "0.1.0"}
AGENT = "192.0.2.10"
OPERATOR = "198.51.100.7"


def refusal_of(device_code: str, source: str = AGENT) -> str:
    with pytest.raises(EnrolmentRefused) as refused:
        enrolment.poll(device_code, source=source)
    assert refused.value.status == 400
    return refused.value.code


def test_a_code_is_eight_letters_without_vowels_or_look_alikes():
    codes = {enrolment.new_user_code() for _ in range(500)}
    assert len(codes) == 500
    for code in codes:
        assert re.fullmatch(r"[BCDFGHJKLMNPQRSTVWXZ]{4}-[BCDFGHJKLMNPQRSTVWXZ]{4}", code)
    assert enrolment.normalise_user_code(" wdjb mjht ") == "WDJBMJHT"


def test_approved_code_gives_a_new_device_its_token_once():
    started = enrolment.start(INFO, source=AGENT)
    assert (started.expires_in, started.interval) == (600, 5)
    assert refusal_of(started.device_code) == "authorization_pending"
    row = Enrolment.objects.get(pk=started.enrolment_id)
    assert (row.status, row.source_address, row.agent_info) == ("pending", AGENT, INFO)

    approved = enrolment.approve(
        started.user_code.lower().replace("-", " "),  # as a person may type it
        source=OPERATOR,
        actor="admin:oncall",
        tenant="acme",
        name="shop-7",
    )
    assert approved.status == EnrolmentStatus.APPROVED
    assert str(approved.device) == "acme/shop-7"
    Enrolment.objects.filter(pk=row.pk).update(last_polled_at=None)  # not a fast poll

    grant = enrolment.poll(started.device_code, source=AGENT)
    assert (grant.tenant, grant.device) == ("acme", "shop-7")
    assert credentials.device_for_token(grant.token) == approved.device
    # Reused: the token is never handed out again, and the code approves nothing more.
    Enrolment.objects.filter(pk=row.pk).update(last_polled_at=None)
    assert refusal_of(started.device_code) == "invalid_grant"
    with pytest.raises(NotFound):
        enrolment.approve(
            started.user_code, source=OPERATOR, actor="x", tenant="acme", name="shop-8"
        )
    assert credentials.device_for_token(grant.token) == approved.device
    assert not Device.objects.filter(name="shop-8").exists()


def test_denied_code_answers_access_denied_and_makes_no_device():
    started = enrolment.start(INFO, source=AGENT)
    enrolment.deny(started.user_code, source=OPERATOR, actor="admin:oncall")
    assert refusal_of(started.device_code) == "access_denied"
    assert not Device.objects.exists()
    with pytest.raises(NotFound):  # decided once
        enrolment.approve(started.user_code, source=OPERATOR, actor="x", tenant="a", name="b")


def test_polling_faster_than_the_interval_slows_the_agent_down():
    started = enrolment.start(INFO, source=AGENT)
    assert refusal_of(started.device_code) == "authorization_pending"
    assert refusal_of(started.device_code) == "slow_down"  # the same instant
    assert Enrolment.objects.get(pk=started.enrolment_id).interval == 10


def test_an_existing_device_re_enrolled_gets_a_new_token_and_the_old_one_stops():
    device, old_token = credentials.create_device("acme", "front-desk")
    started = enrolment.start(INFO, source=AGENT)
    enrolment.approve(started.user_code, source=OPERATOR, actor="admin:oncall", device=device)
    assert credentials.device_for_token(old_token) is None  # cut off at the approval
    grant = enrolment.poll(started.device_code, source=AGENT)
    assert credentials.device_for_token(grant.token) == device
    assert Device.objects.count() == 1


def test_a_cloudprnt_printer_cannot_be_re_enrolled_as_an_agent():
    printer, _ = credentials.create_device("acme", "tsp100", kind="cloudprnt")
    started = enrolment.start(INFO, source=AGENT)
    with pytest.raises(Conflict, match="not an agent"):
        enrolment.approve(started.user_code, source=OPERATOR, actor="x", device=printer)
    assert Enrolment.objects.get(pk=started.enrolment_id).status == "pending"


def test_a_taken_name_is_refused_and_the_code_stays_pending():
    credentials.create_device("acme", "front-desk")
    started = enrolment.start(INFO, source=AGENT)
    with pytest.raises(Conflict):
        enrolment.approve(
            started.user_code, source=OPERATOR, actor="x", tenant="acme", name="front-desk"
        )
    assert Enrolment.objects.get(pk=started.enrolment_id).status == "pending"


@override_settings(QPRINT={"AUTH_FAILURE_LIMIT": 3})
def test_guessed_codes_are_throttled_even_the_right_one():
    started = enrolment.start(INFO, source=AGENT)
    for guess in ("BBBB-BBBB", "CCCC-CCCC", "DDDD-DDDD"):
        with pytest.raises(NotFound):
            enrolment.approve(guess, source=OPERATOR, actor="x", tenant="acme", name="n")
    with pytest.raises(RateLimited):  # the right code, from the guesser's address
        enrolment.approve(started.user_code, source=OPERATOR, actor="x", tenant="acme", name="n")
    with pytest.raises(RateLimited):  # and it starts no enrolment either
        enrolment.start(INFO, source=OPERATOR)
    # Guessed device codes on the token poll count the same way.
    for _ in range(3):
        assert refusal_of("not-a-code", source="203.0.113.5") == "invalid_grant"
    with pytest.raises(RateLimited):
        enrolment.poll(started.device_code, source="203.0.113.5")
    assert refusal_of(started.device_code) == "authorization_pending"  # the agent is unharmed


@override_settings(QPRINT={"ENROLMENT_PENDING_PER_ADDRESS": 3})
def test_one_address_has_at_most_its_number_of_enrolments_waiting():
    """Starting an enrolment needs no credential: one address may not fill the operator's
    page. Beyond the bound a start is 429 with when to try again; deciding one makes room, and
    other addresses are not touched."""
    started = [enrolment.start(INFO, source=AGENT) for _ in range(3)]
    with pytest.raises(RateLimited) as refused:
        enrolment.start(INFO, source=AGENT)
    assert 1 <= refused.value.retry_after <= 600
    assert "3 enrolments from this address" in refused.value.message
    enrolment.start(INFO, source=OPERATOR)  # another address
    enrolment.deny(started[0].user_code, source=OPERATOR, actor="x")
    enrolment.start(INFO, source=AGENT)
    assert Enrolment.objects.filter(source_address=AGENT).count() == 4


@pytest.mark.django_db(transaction=True)
@override_settings(QPRINT={"ENROLMENT_EXPIRES_SECONDS": 1})
def test_an_expired_code_answers_expired_token_and_the_retention_task_deletes_it():
    started = enrolment.start(INFO, source=AGENT)
    wait_until(
        lambda: not enrolment.pending().exists(), 10, message="the enrolment expired (db clock)"
    )
    assert refusal_of(started.device_code) == "expired_token"
    with pytest.raises(NotFound):
        enrolment.approve(started.user_code, source=OPERATOR, actor="x", tenant="a", name="b")
    maintenance.retain()
    assert not Enrolment.objects.exists()
    assert not Device.objects.exists()


def test_no_code_or_token_is_stored_or_logged(caplog):
    caplog.set_level(logging.DEBUG)
    started = enrolment.start(INFO, source=AGENT)
    with pytest.raises(NotFound):
        enrolment.approve("XXXX-XXXX", source=OPERATOR, actor="x", tenant="acme", name="n")
    enrolment.approve(started.user_code, source=OPERATOR, actor="x", tenant="acme", name="n")
    grant = enrolment.poll(started.device_code, source=AGENT)
    stored, logged = every_stored_text(), caplog.text
    secrets = (started.device_code, grant.token, started.user_code, "XXXX-XXXX")
    for secret in (*secrets, started.user_code.replace("-", "")):
        assert secret not in stored
        assert secret not in logged
    assert "enrolment_approved" in logged


def test_http_enrolment_answers_as_the_oauth_device_grant(client):
    start = client.post(
        reverse("qprint:device-enrollments"),
        {"agent_info": INFO},
        content_type="application/json",
        REMOTE_ADDR=AGENT,
    )
    assert start.status_code == 201
    body = start.json()
    assert set(body) == {
        "device_code",
        "user_code",
        "verification_uri",
        "verification_uri_complete",
        "expires_in",
        "interval",
    }
    assert body["verification_uri"] == "http://testserver/admin/qprint/enrolment/"
    token_url = reverse("qprint:device-enrollment-token")
    pending = client.post(
        token_url, {"device_code": body["device_code"]}, content_type="application/json"
    )
    assert pending.status_code == 400
    assert pending.json()["error"] == "authorization_pending"
    enrolment.approve(body["user_code"], source=OPERATOR, actor="x", tenant="acme", name="n")
    Enrolment.objects.update(last_polled_at=None)
    granted = client.post(
        token_url, {"device_code": body["device_code"]}, content_type="application/json"
    )
    assert granted.status_code == 200
    assert granted.json()["tenant"] == "acme" and granted.json()["device"] == "n"
    assert granted["Cache-Control"] == "no-store"
    # What the operator and the logs show of the agent is one line: no client writes a log line.
    forged = {"agent_info": {"hostname": "pc\n2026-01-01 INFO qprint.jobs job_status to=PRINTED"}}
    refused = client.post(
        reverse("qprint:device-enrollments"), forged, content_type="application/json"
    )
    assert (refused.status_code, refused.json()["error"]) == (422, "invalid_text")
    assert "agent_info.hostname" in refused.json()["message"]
    bad = client.post(token_url, {"device_code": 5}, content_type="application/json")
    assert (bad.status_code, bad.json()["error"]) == (400, "invalid_request")
    # A code holding a lone surrogate (a JSON "\ud800") is no code made here: unknown.
    for text in (b'{"device_code": "\\ud800"}', b'{"device_code": "abc\\udfff"}'):
        odd = client.post(token_url, text, content_type="application/json")
        assert (odd.status_code, odd.json()["error"]) == (400, "invalid_grant")
    assert client.get(token_url).status_code == 405
