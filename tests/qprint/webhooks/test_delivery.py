"""Webhook delivery end to end on PostgreSQL: the outbox rows written with the state change, a
real sender, a real receiver verifying Standard Webhooks signatures with ``standardwebhooks``."""

from __future__ import annotations

import threading
import uuid

import pytest
from django.db import connection, transaction
from django.test import override_settings

from qprint import api
from qprint.domain import connection as connection_record
from qprint.domain import events
from qprint.domain.claim import claim_next_job
from qprint.models import DeliveryStatus, PrintJob, WebhookDelivery
from qprint.models.serializers import device_object, job_object
from qprint.webhooks import endpoints, outbox, outbox_taking
from tests.qprint.factories import connect, make_device
from tests.qprint.webhooks.conftest import LOOPBACK
from tests.waiting import wait_until

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]

PDF = b"%PDF-1.4\n%%EOF\n"


def report(device, job, type_, claim_id):
    body = {
        "event_id": str(uuid.uuid4()),
        "type": type_,
        "claim_id": str(claim_id),
        "occurred_at": "2026-01-01T00:00:00Z",
    }
    return events.record_device_event(device, job.pk, body)


def print_a_job(device):
    job, _ = api.submit_job(device.tenant, device.name, PDF, "application/pdf", title="Label")
    assignment = claim_next_job(device.pk)
    for step in ("RECEIVED", "SPOOLED", "PRINTED"):
        report(device, job, step, assignment.claim_id)
    return job


def test_every_event_of_a_printed_job_arrives_signed_in_the_documented_shape(
    endpoint, receiver, start_sender
):
    device = connect(make_device().device)
    job = print_a_job(device)
    start_sender()

    expected = ["job.queued", "job.claimed", "job.received", "job.spooled", "job.printed"]
    wait_until(lambda: len(receiver.ok()) >= 5, 20, message="five verified deliveries")
    got = {r.json["type"]: r for r in receiver.ok()}
    assert sorted(got) == sorted(expected)
    fresh = PrintJob.objects.select_related("device").get(pk=job.pk)
    for type_, delivery in got.items():
        body = delivery.json
        assert set(body) == {"type", "timestamp", "data"}
        assert set(body["data"]) == {"job"}
        assert set(body["data"]["job"]) == set(job_object(fresh))
        assert body["data"]["job"]["id"] == str(job.pk)
        assert body["data"]["job"]["status"] == type_.removeprefix("job.").upper()
        assert delivery.headers["content-type"] == "application/json"
        assert delivery.headers["webhook-id"].startswith("msg_")
    rows = WebhookDelivery.objects.filter(endpoint=endpoint)
    assert {r.event_id for r in rows} == {r.webhook_id for r in receiver.ok()}
    wait_until(
        lambda: all(r.status == DeliveryStatus.DELIVERED for r in rows.all()), 10, message="rows"
    )
    assert all(r.attempts == 1 and r.last_status_code == 200 for r in rows.all())


def test_a_rolled_back_change_announces_nothing(endpoint, receiver, start_sender):
    device = make_device().device
    job, _ = api.submit_job("acme", device.name, PDF, "application/pdf")

    class Abort(Exception):
        pass

    with pytest.raises(Abort), transaction.atomic():
        api.cancel_job(job)
        assert WebhookDelivery.objects.filter(type="job.cancelled").count() == 1
        raise Abort
    assert list(WebhookDelivery.objects.values_list("type", flat=True)) == ["job.queued"]
    api.cancel_job(job)  # the same change committed is announced
    start_sender()
    wait_until(lambda: len(receiver.ok()) == 2, 20, message="the submission and the cancel")
    assert sorted(r.json["type"] for r in receiver.ok()) == ["job.cancelled", "job.queued"]


def test_a_receiver_that_is_down_gets_every_event_after_it_comes_back(
    endpoint, receiver, start_sender, monkeypatch
):
    monkeypatch.setattr(outbox_taking, "BACKOFF_BASE_SECONDS", 0.2)
    monkeypatch.setattr(outbox_taking, "MAX_BACKOFF_SECONDS", 1.0)
    port = receiver.port
    receiver.stop()  # nothing listens: connection refused
    device = connect(make_device().device)
    jobs = [print_a_job(device) for _ in range(3)]
    start_sender(poll_seconds=0.2)
    wait_until(
        lambda: WebhookDelivery.objects.filter(attempts__gte=2).count() == 15,
        20,
        message="every delivery tried at least twice while the receiver is down",
    )
    assert not WebhookDelivery.objects.filter(status=DeliveryStatus.DELIVERED).exists()
    receiver.start(port)
    wait_until(
        lambda: WebhookDelivery.objects.filter(status=DeliveryStatus.DELIVERED).count() == 15,
        30,
        message="all fifteen delivered once the receiver is back",
    )
    assert receiver.ids() == set(WebhookDelivery.objects.values_list("event_id", flat=True))
    printed = {
        r.json["data"]["job"]["id"] for r in receiver.ok() if r.json["type"] == "job.printed"
    }
    assert printed == {str(j.pk) for j in jobs}


def test_a_failing_answer_is_retried_and_recorded(endpoint, receiver, start_sender, monkeypatch):
    monkeypatch.setattr(outbox_taking, "BACKOFF_BASE_SECONDS", 0.2)
    receiver.status = 500
    endpoints.send_test(endpoint)
    start_sender(poll_seconds=0.2)
    row = wait_until(
        lambda: WebhookDelivery.objects.filter(attempts__gte=2).first(), 20, message="a retry"
    )
    assert row.status in (DeliveryStatus.PENDING, DeliveryStatus.SENDING)
    assert row.last_status_code == 500 and row.last_response == "ok"
    receiver.status = 200
    wait_until(
        lambda: WebhookDelivery.objects.filter(status=DeliveryStatus.DELIVERED).exists(),
        20,
        message="delivered once the receiver answers 200",
    )


def test_a_delivery_failing_for_three_days_is_marked_failed(endpoint, receiver):
    receiver.status = 503
    delivery = endpoints.send_test(endpoint)
    WebhookDelivery.objects.filter(pk=delivery.pk).update(
        created_at=delivery.created_at - outbox_taking.RETRY_FOR
    )
    (due,) = outbox_taking.take_due(10)
    assert outbox_taking.record_attempt(due, outbox_taking.Outcome(status_code=503, answer="busy"))
    delivery.refresh_from_db()
    assert delivery.status == DeliveryStatus.FAILED
    assert outbox_taking.take_due(10) == []
    assert outbox.retry([delivery.pk]) == 1  # the admin's retry
    assert [d.id for d in outbox_taking.take_due(10)] == [delivery.pk]


def test_two_senders_never_send_the_same_row_at_the_same_moment(endpoint, receiver, start_sender):
    receiver.delay = 0.05
    for _ in range(60):
        outbox.announce_test(endpoint)
    start_sender(max_in_flight=8, poll_seconds=0.1)
    start_sender(max_in_flight=8, poll_seconds=0.1)
    wait_until(
        lambda: WebhookDelivery.objects.filter(status=DeliveryStatus.DELIVERED).count() == 60,
        60,
        message="sixty deliveries",
    )
    assert receiver.overlaps == []
    assert sorted(receiver.started) == sorted(
        WebhookDelivery.objects.values_list("event_id", flat=True)
    )  # each sent once: no row was taken by both senders


@override_settings(
    QPRINT={
        **LOOPBACK,
        "WEBHOOK_MAX_IN_FLIGHT_PER_ENDPOINT": 100,
        "WEBHOOK_MAX_IN_FLIGHT_PER_TENANT": 100,
    }
)
def test_concurrent_takers_get_disjoint_rows(endpoint):
    for _ in range(40):
        outbox.announce_test(endpoint)
    barrier = threading.Barrier(4)
    taken: list[list[int]] = []

    def take():
        barrier.wait()
        try:
            taken.append([d.id for d in outbox_taking.take_due(15)])
        finally:
            connection.close()

    threads = [threading.Thread(target=take) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    ids = [i for batch in taken for i in batch]
    assert len(ids) == len(set(ids)) == 40


def test_device_connect_and_disconnect_are_announced_with_the_device_summary(
    endpoint, receiver, start_sender
):
    device = make_device().device
    connection_id = uuid.uuid4()
    connection_record.take(device.pk, connection_id, "node-a", 20)
    assert connection_record.clear(device.pk, connection_id)
    assert not connection_record.clear(device.pk, connection_id)  # not this connection's row
    start_sender()
    wait_until(lambda: len(receiver.ok()) >= 2, 20, message="two device events")
    by_type = {r.json["type"]: r.json["data"]["device"] for r in receiver.ok()}
    assert set(by_type) == {"device.connected", "device.disconnected"}
    assert by_type["device.connected"]["online"] is True
    assert by_type["device.connected"]["node"] == "node-a"
    assert by_type["device.disconnected"]["online"] is False
    assert by_type["device.connected"] == {
        **device_object(api.device_summary("acme", device.name)),
        "online": True,
        "node": "node-a",
        "last_seen_at": by_type["device.connected"]["last_seen_at"],
    }


def test_an_endpoint_gets_only_the_events_it_asked_for(receiver, loopback_allowed):
    endpoint, _ = endpoints.create_endpoint("acme", receiver.url, events=["job.printed"])
    device = connect(make_device().device)
    print_a_job(device)
    assert list(endpoint.deliveries.values_list("type", flat=True)) == ["job.printed"]
    other, _ = endpoints.create_endpoint("globex", receiver.url)
    assert not other.deliveries.exists()  # another tenant's job is not announced to it


def test_during_a_rotation_both_secrets_sign(endpoint, receiver, start_sender):
    old = receiver.secrets[0]
    new = endpoints.rotate_secret(endpoint)
    receiver.secrets[:] = [old]
    endpoints.send_test(endpoint)
    start_sender()
    wait_until(lambda: receiver.ok(), 20, message="a delivery verified with the old secret")
    receiver.secrets[:] = [new]
    headers = receiver.received[0].headers
    assert receiver.verify(receiver.received[0].body, headers)
    assert len(headers["webhook-signature"].split(" ")) == 2


def test_metrics_show_the_outbox_and_the_senders_attempts(endpoint, receiver, start_sender):
    from qprint.metrics import collectors
    from qprint.webhooks import sender
    from tests.exposition import value

    before = sender.figures.attempts["delivered"]
    endpoints.send_test(endpoint)
    endpoints.send_test(endpoint)
    text = collectors.render()
    assert value(text, "qprint_webhook_deliveries", status="PENDING") == 2
    assert value(text, "qprint_webhook_oldest_undelivered_seconds") >= 0
    latency_before = value(text, "qprint_webhook_delivery_latency_seconds_count")
    start_sender()
    wait_until(
        lambda: WebhookDelivery.objects.filter(status=DeliveryStatus.DELIVERED).count() == 2,
        20,
        message="both delivered",
    )
    text = collectors.render()
    assert value(text, "qprint_webhook_deliveries", status="DELIVERED") == 2
    assert value(text, "qprint_webhook_oldest_undelivered_seconds") == 0
    assert sender.figures.attempts["delivered"] == before + 2
    assert value(text, "qprint_webhook_attempts_total", outcome="delivered") == before + 2
    assert value(text, "qprint_webhook_delivery_latency_seconds_count") == latency_before + 2


def test_the_connection_record_statements_stay_alone_without_a_webhook_for_device_events(
    receiver, loopback_allowed
):
    device = make_device().device
    seen: list[tuple[bool, str]] = []

    def observe(execute, sql, params, many, context):
        seen.append((connection.in_atomic_block, sql.split()[0].upper()))
        return execute(sql, params, many, context)

    endpoints.create_endpoint("acme", receiver.url, events=["job.printed"])  # no device events
    connection_id = uuid.uuid4()
    with connection.execute_wrapper(observe):
        connection_record.take(device.pk, connection_id, "node-a", 20)
        connection_record.clear(device.pk, connection_id)
    # Each write is its own statement in autocommit (the reads around it: the endpoints, and the
    # device's active jobs for hello, are outside any transaction too).
    assert [verb for _atomic, verb in seen if verb != "SELECT"] == ["UPDATE", "UPDATE"]
    assert not any(atomic for atomic, _verb in seen)
    assert not WebhookDelivery.objects.exists()

    endpoints.create_endpoint("acme", receiver.url, events=["device.connected"])
    seen.clear()
    with connection.execute_wrapper(observe):
        connection_record.take(device.pk, connection_id, "node-a", 20)
    updates = [atomic for atomic, verb in seen if verb in ("UPDATE", "INSERT")]
    assert updates == [True, True]  # the take and its delivery row, in one transaction
    assert WebhookDelivery.objects.get().type == "device.connected"


def test_old_delivered_rows_are_deleted_by_the_retention_task(endpoint):
    old = endpoints.send_test(endpoint)
    WebhookDelivery.objects.filter(pk=old.pk).update(status=DeliveryStatus.DELIVERED)
    waiting = endpoints.send_test(endpoint)
    assert outbox.delete_old_deliveries(retention_days=0) == 1
    assert list(WebhookDelivery.objects.values_list("pk", flat=True)) == [waiting.pk]


def test_expiry_and_a_failed_print_are_announced(endpoint):
    from qprint.domain import maintenance

    device = connect(make_device().device)
    stale, _ = api.submit_job("acme", device.name, PDF, "application/pdf", expires_in=60)
    PrintJob.objects.filter(pk=stale.pk).update(expires_at=stale.created_at)
    assert maintenance.expire_jobs() == 1
    job, _ = api.submit_job("acme", device.name, PDF, "application/pdf")
    claim = claim_next_job(device.pk)
    report(device, job, "FAILED", claim.claim_id)
    announced = {
        (d.type, d.payload["data"]["job"]["id"], d.payload["data"]["job"]["status"])
        for d in WebhookDelivery.objects.filter(endpoint=endpoint)
    }
    assert announced == {
        ("job.queued", str(stale.pk), "QUEUED"),
        ("job.expired", str(stale.pk), "EXPIRED"),
        ("job.queued", str(job.pk), "QUEUED"),
        ("job.claimed", str(job.pk), "CLAIMED"),
        ("job.failed", str(job.pk), "FAILED"),
    }


def test_a_submission_is_announced_in_its_own_transaction_and_a_reprint_too(endpoint):
    """``job.queued``: a committed submission has its delivery row, a rolled-back one none."""
    device = make_device().device

    class Abort(Exception):
        pass

    with pytest.raises(Abort), transaction.atomic():
        api.submit_job("acme", device.name, PDF, "application/pdf", title="never")
        assert WebhookDelivery.objects.filter(type="job.queued").count() == 1
        raise Abort
    assert not WebhookDelivery.objects.exists()
    job, created = api.submit_job("acme", device.name, PDF, "application/pdf", idempotency_key="k")
    again, created_again = api.submit_job(
        "acme", device.name, PDF, "application/pdf", idempotency_key="k"
    )
    assert created and not created_again and again.pk == job.pk  # a replay announces nothing
    reprint = api.reprint_job(job)
    announced = [
        (d.type, d.payload["data"]["job"]["id"], d.payload["data"]["job"]["status"])
        for d in WebhookDelivery.objects.filter(endpoint=endpoint).order_by("id")
    ]
    assert announced == [
        ("job.queued", str(job.pk), "QUEUED"),
        ("job.queued", str(reprint.pk), "QUEUED"),
    ]


@pytest.mark.parametrize(("use_tz", "zone"), [(True, "UTC"), (False, "Europe/Paris")])
def test_the_signature_verifies_and_the_timestamp_is_now_whatever_the_time_settings(
    settings, use_tz, zone
):
    """With ``USE_TZ = False`` Django's now is the local time without a zone: the library signed
    it as UTC while the header read it as local, and no receiver could verify."""
    import time

    from django.utils import timezone
    from standardwebhooks.webhooks import Webhook

    from qprint.webhooks import signing

    settings.USE_TZ, settings.TIME_ZONE = use_tz, zone
    secret = signing.new_secret()
    body = '{"type":"webhook.test","data":{}}'
    headers = signing.headers("msg_1", timezone.now(), body, [secret])
    assert abs(int(headers["webhook-timestamp"]) - time.time()) < 60
    Webhook(secret).verify(body, headers)  # raises when the signature does not match
