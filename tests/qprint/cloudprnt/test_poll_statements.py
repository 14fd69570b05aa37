"""The CloudPRNT poll of a live printer is ONE statement, its authentication included; every
other poll takes the way of any request and answers as it always did (docs/CLOUDPRNT.md, "Cost
and limits").

On PostgreSQL the test's transaction holds the clock the connection record uses still (``now()``
is the transaction's start, not the statement's), so a lease is compared exactly against it."""

from datetime import timedelta

import pytest
from django.db import connection
from django.db.models import DateTimeField, F
from django.db.models.expressions import RawSQL
from django.test import override_settings
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from qprint import api
from qprint.domain import devices
from qprint.models import Device, PrintJob, WebhookDelivery
from qprint.webhooks import endpoints
from tests.qprint.cloudprnt.simulator import StarPrinter, over_test_client

pytestmark = [pytest.mark.services, pytest.mark.django_db]


@pytest.fixture(autouse=True)
def postgresql_only():
    if connection.vendor != "postgresql":
        pytest.skip("the statement counts are PostgreSQL's")


@pytest.fixture
def made():
    return api.create_device("acme", "counter", kind="cloudprnt")


@pytest.fixture
def printer(client, made):
    device, token = made
    return StarPrinter(over_test_client(client, reverse("qprint:cloudprnt")), device.name, token)


@pytest.fixture
def live(printer):
    """A printer that polled and described itself: its next idle poll has nothing new."""
    printer.poll()
    printer.poll()  # answers the server's requests (model, firmware, poll interval)
    return printer


def statements(func):
    """``func()``'s result and every statement it sent (BEGIN and COMMIT are not statements)."""
    with CaptureQueriesContext(connection) as captured:
        result = func()
    return result, [
        q["sql"] for q in captured.captured_queries if q["sql"] not in ("BEGIN", "COMMIT")
    ]


def now():
    """The connection record's clock (``now()``; Django's ``Now`` is the statement's)."""
    return RawSQL("now()", [], output_field=DateTimeField())


def row(device):
    return Device.objects.annotate(lease_left=F("connection_lease_expires_at") - now()).get(
        pk=device.pk
    )


def shorten_lease(device, seconds):
    Device.objects.filter(pk=device.pk).update(
        connection_lease_expires_at=now() + timedelta(seconds=seconds)
    )


def test_an_idle_poll_of_a_live_printer_is_one_statement(live, made):
    device, _ = made
    shorten_lease(device, 1)
    before = row(device)

    answer, sent = statements(live.poll)

    assert answer == {"jobReady": False}
    assert len(sent) == 1, sent
    assert sent[0].lstrip().startswith("UPDATE") and "token_hash" in sent[0]
    after = row(device)
    # The poll renewed the lease (3 x the interval the printer reported, 5 s) and kept the row.
    assert after.lease_left == timedelta(seconds=15)
    assert after.connection_id == before.connection_id
    assert after.printer_mac == live.mac


def test_a_job_to_hand_out_is_claimed_after_the_one_statement(live):
    job, _ = api.submit_job("acme", "counter", b"receipt", "text/plain")
    answer = live.poll()
    assert answer["jobReady"] is True
    assert answer["jobToken"] == str(PrintJob.objects.get(pk=job.pk).claim_id)
    assert live.poll()["jobToken"] == answer["jobToken"]  # replayed on the fast path too


def test_the_lease_follows_the_interval_the_printer_reported(live, made):
    device, _ = made
    devices.keep_agent_info(device.pk, {"poll_interval": 10})
    live.poll()
    assert row(device).lease_left == timedelta(seconds=30)
    devices.keep_agent_info(device.pk, {"poll_interval": True})  # not a number: the default
    live.poll()
    assert row(device).lease_left == timedelta(seconds=15)


def test_a_wrong_password_is_401_then_throttled_and_the_right_one_still_polls(live):
    with override_settings(QPRINT={"AUTH_FAILURE_LIMIT": 3}):
        for n in range(3):
            wrong = StarPrinter(live.send, live.name, f"guess-{n}", mac=live.mac)
            reply = wrong.poll_raw()
            assert reply.status == 401
            assert reply.headers["WWW-Authenticate"].startswith("Basic")
        throttled = StarPrinter(live.send, live.name, "guess-again", mac=live.mac).poll_raw()
        assert throttled.status == 429
        assert "Retry-After" in throttled.headers
        # A right token is never refused by the throttle, and keeps its one statement.
        answer, sent = statements(live.poll)
        assert answer == {"jobReady": False} and len(sent) == 1, sent


def test_the_right_token_under_another_name_is_401_and_renews_nothing(live, made):
    device, _ = made
    shorten_lease(device, 1)
    reply = StarPrinter(live.send, "someone-else", live.token, mac=live.mac).poll_raw()
    assert reply.status == 401
    assert row(device).lease_left == timedelta(seconds=1)


def test_a_disabled_device_is_403(live, made):
    device, _ = made
    job, _ = api.submit_job("acme", "counter", b"receipt", "text/plain")
    api.disable_device(device)
    reply = live.poll_raw()
    assert reply.status == 403
    assert reply.json()["error"] == "disabled"
    assert PrintJob.objects.get(pk=job.pk).status == "QUEUED"


def test_another_mac_is_403_and_changes_nothing(live, made):
    device, _ = made
    shorten_lease(device, 1)
    before = row(device)
    impostor = StarPrinter(live.send, live.name, live.token, mac="00:11:62:ff:ff:ff")
    reply = impostor.poll_raw()
    assert reply.status == 403
    assert reply.json()["error"] == "printer_mismatch"
    after = row(device)
    assert after.connection_id == before.connection_id
    assert after.lease_left == timedelta(seconds=1)
    assert after.printer_mac == live.mac
    assert after.agent_info["refused_mac"] == impostor.mac


@override_settings(QPRINT={"WEBHOOK_ALLOW_HTTP": True, "WEBHOOK_ALLOWED_HOSTS": ["127.0.0.1"]})
def test_the_first_poll_binds_the_mac_and_takes_the_row(printer, made):
    device, _ = made
    endpoints.create_endpoint("acme", "http://127.0.0.1:9/hooks")
    answer, sent = statements(printer.poll)
    assert "jobReady" in answer
    assert len(sent) > 1  # the one statement matched nothing: the full way ran
    taken = row(device)
    assert taken.printer_mac == printer.mac
    assert taken.connection_id is not None
    assert taken.lease_left == timedelta(seconds=3 * 5)
    assert WebhookDelivery.objects.filter(type="device.connected").count() == 1


@override_settings(QPRINT={"WEBHOOK_ALLOW_HTTP": True, "WEBHOOK_ALLOWED_HOSTS": ["127.0.0.1"]})
def test_an_expired_lease_is_taken_again(live, made):
    device, _ = made
    endpoints.create_endpoint("acme", "http://127.0.0.1:9/hooks")
    before = row(device)
    Device.objects.filter(pk=device.pk).update(
        connection_lease_expires_at=now() - timedelta(seconds=1)
    )
    assert live.poll() == {"jobReady": False}
    after = row(device)
    assert after.connection_id != before.connection_id
    assert after.lease_left == timedelta(seconds=15)
    assert WebhookDelivery.objects.filter(type="device.connected").count() == 1
    # Live again: back to the one statement.
    _, sent = statements(live.poll)
    assert len(sent) == 1, sent
