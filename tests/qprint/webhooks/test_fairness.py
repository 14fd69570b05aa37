"""One tenant cannot hold up another's webhooks: the take is fair between endpoints and tenants,
each has a cap of rows in flight, slow endpoints are held back, endpoints and test calls are
limited (docs/WEBHOOKS.md, "Fairness")."""

from __future__ import annotations

import threading

import pytest
from django.db.models.functions import Now
from django.test import override_settings
from django.urls import reverse

from qprint.core.conf import qprint_settings
from qprint.models import DeliveryStatus, WebhookDelivery, WebhookEndpoint
from qprint.webhooks import destinations, endpoints, outbox, outbox_taking
from tests.qprint.factories import make_key
from tests.qprint.webhooks.conftest import LOOPBACK
from tests.qprint.webhooks.receiver import Receiver
from tests.waiting import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def endpoint_of(tenant: str, receiver: Receiver) -> WebhookEndpoint:
    endpoint, secret = endpoints.create_endpoint(tenant, receiver.url)
    receiver.secrets.append(secret)
    return endpoint


def test_the_take_serves_every_endpoint_before_a_second_row_of_any(loopback_allowed, receiver):
    noisy = [endpoint_of("noisy", receiver) for _ in range(2)]
    for endpoint in noisy:
        for _ in range(20):
            outbox.announce_test(endpoint)
    quiet = outbox.announce_test(endpoint_of("quiet", receiver))  # due last of all
    taken = outbox_taking.take_due(3)
    assert quiet.pk in {d.id for d in taken}
    assert sorted(str(d.endpoint_id) for d in taken if d.id != quiet.pk) == sorted(
        str(e.pk) for e in noisy
    )


def test_no_endpoint_nor_tenant_has_more_than_its_cap_in_flight(loopback_allowed, receiver):
    with override_settings(
        QPRINT={
            **LOOPBACK,
            "WEBHOOK_MAX_IN_FLIGHT_PER_ENDPOINT": 2,
            "WEBHOOK_MAX_IN_FLIGHT_PER_TENANT": 3,
        }
    ):
        first, second = endpoint_of("noisy", receiver), endpoint_of("noisy", receiver)
        for endpoint in (first, second):
            for _ in range(10):
                outbox.announce_test(endpoint)
        # the second take sees the first's rows
        taken = outbox_taking.take_due(16) + outbox_taking.take_due(16)
        assert len(taken) == 3
        by_endpoint = [sum(d.endpoint_id == e.pk for d in taken) for e in (first, second)]
        assert max(by_endpoint) == 2
        (due,) = [d for d in taken if d.endpoint_id == first.pk][:1]
        outbox_taking.record_attempt(due, outbox_taking.Outcome(status_code=200, seconds=0.01))
        assert len(outbox_taking.take_due(16)) == 1  # one row done: room for one more


def test_a_tenant_whose_receivers_hang_does_not_hold_up_another_tenants_delivery(
    loopback_allowed, start_sender
):
    """The noisy tenant fills the outbox for receivers that never answer; the quiet tenant's
    delivery is still sent while not one of the noisy attempts has ended."""
    hanging, quiet_receiver = Receiver(hold=threading.Event()), Receiver()
    hanging.hold.set()
    hanging.start()
    quiet_receiver.start()
    try:
        cap = qprint_settings.WEBHOOK_MAX_ENDPOINTS_PER_TENANT
        for _ in range(cap):
            endpoint = endpoint_of("noisy", hanging)
            for _ in range(8):
                outbox.announce_test(endpoint)  # the traffic of its jobs, not /test calls
        quiet = endpoint_of("quiet", quiet_receiver)
        start_sender(max_in_flight=16, poll_seconds=0.2)
        per_tenant = qprint_settings.WEBHOOK_MAX_IN_FLIGHT_PER_TENANT
        wait_until(
            lambda: len(hanging.started) >= per_tenant, 20, message="the noisy tenant's attempts"
        )
        delivery = endpoints.send_test(quiet)
        wait_until(
            lambda: delivery.event_id in quiet_receiver.ids(),
            5,  # well inside one attempt's timeout: no slot had to be given back
            message="the quiet tenant's delivery, while the noisy receivers hang",
        )
        assert hanging.hold.is_set() and hanging.received == []
        assert len(hanging.started) == per_tenant  # its share of the sender's slots, no more
    finally:
        hanging.hold.clear()
        hanging.stop()
        quiet_receiver.stop()


def test_a_slow_endpoint_is_held_back_and_a_fast_answer_lets_it_go(
    loopback_allowed, receiver, start_sender
):
    with override_settings(QPRINT={**LOOPBACK, "WEBHOOK_SLOW_SECONDS": 0.2}):
        slow = endpoint_of("slow", receiver)
        other = endpoint_of("other", receiver)
        receiver.delay = 0.5
        first = outbox.announce_test(slow)
        running = start_sender(poll_seconds=0.2)
        wait_until(
            lambda: WebhookDelivery.objects.filter(pk=first.pk, status="DELIVERED").exists(),
            20,
            message="the slow delivery",
        )
        running.close()
        slow.refresh_from_db()
        assert slow.slow_attempts == 1 and slow.backoff_until is not None
        held = outbox.announce_test(slow)
        free = outbox.announce_test(other)
        assert [d.id for d in outbox_taking.take_due(10)] == [free.pk]  # the slow one waits
        # Its pause over, it is taken again; a fast answer clears its record.
        WebhookEndpoint.objects.filter(pk=slow.pk).update(backoff_until=Now())
        (due,) = outbox_taking.take_due(10)
        assert due.id == held.pk
        outbox_taking.record_attempt(due, outbox_taking.Outcome(status_code=204, seconds=0.01))
        slow.refresh_from_db()
        assert (slow.slow_attempts, slow.backoff_until) == (0, None)
        assert WebhookDelivery.objects.get(pk=held.pk).status == DeliveryStatus.DELIVERED


@pytest.fixture
def public_dns(monkeypatch):
    monkeypatch.setattr(destinations, "resolve", lambda host, port: ["93.184.216.34"])


def test_a_tenant_may_have_so_many_endpoints(client, public_dns):
    noisy, quiet = make_key("noisy"), make_key("quiet", name="quiet-key")
    url = reverse("qprint:webhooks")
    body = {"url": "https://hooks.example/"}
    limit = qprint_settings.WEBHOOK_MAX_ENDPOINTS_PER_TENANT
    for _ in range(limit):
        assert (
            client.post(url, body, content_type="application/json", **noisy.auth).status_code == 201
        )
    refused = client.post(url, body, content_type="application/json", **noisy.auth)
    assert refused.status_code == 422 and refused.json()["error"] == "too_many"
    assert WebhookEndpoint.objects.filter(tenant="noisy").count() == limit
    assert client.post(url, body, content_type="application/json", **quiet.auth).status_code == 201


def test_test_calls_are_limited_per_tenant(client, public_dns):
    noisy, quiet = make_key("noisy"), make_key("quiet", name="quiet-key")
    made = endpoints.create_endpoint("noisy", "https://hooks.example/")[0]
    theirs = endpoints.create_endpoint("quiet", "https://hooks.example/")[0]
    url = reverse("qprint:webhook-test", args=[made.pk])
    limit = qprint_settings.WEBHOOK_TESTS_PER_MINUTE
    assert all(client.post(url, **noisy.auth).status_code == 202 for _ in range(limit))
    refused = client.post(url, **noisy.auth)
    assert refused.status_code == 429 and refused.json()["error"] == "rate_limited"
    assert int(refused["Retry-After"]) > 0
    assert WebhookDelivery.objects.filter(endpoint=made).count() == limit
    other = client.post(reverse("qprint:webhook-test", args=[theirs.pk]), **quiet.auth)
    assert other.status_code == 202
