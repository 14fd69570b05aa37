"""Webhooks delivered by ``cluster_runtime`` nodes as real processes on PostgreSQL and Redis."""

from __future__ import annotations

import threading
import time
import uuid
from datetime import timedelta

import pytest
from django.test import override_settings

from qprint import api
from qprint.domain import events
from qprint.domain.claim import claim_next_job
from qprint.models import DeliveryStatus, WebhookDelivery
from qprint.webhooks import endpoints, outbox_taking
from tests.processes import ManagedProcess, manage, wait_for_other_sessions_to_end
from tests.qprint.factories import connect, make_device
from tests.waiting import wait_until

pytestmark = [pytest.mark.services, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

PDF = b"%PDF-1.4\n%%EOF\n"


@pytest.fixture
def node(subprocess_env, services):
    """Start ``cluster_runtime`` nodes that may send to 127.0.0.1; all are killed at the end."""
    started: list[ManagedProcess] = []

    def start(node_id: str) -> ManagedProcess:
        env = {
            **subprocess_env,
            "REDIS_URL": services.redis_url,
            "QPRINT_WEBHOOK_ALLOW_HTTP": "1",
            "QPRINT_WEBHOOK_ALLOWED_HOSTS": "127.0.0.1",
            "QCLUSTER_DRAIN_GRACE_SECONDS": "5",
        }
        process = ManagedProcess(
            f"runtime-{node_id}", manage("cluster_runtime", "--node-id", node_id), env
        ).start()
        started.append(process)
        return process

    yield start
    for process in started:
        process.kill()
    wait_for_other_sessions_to_end()


def print_a_job():
    device = connect(make_device().device)
    job, _ = api.submit_job("acme", device.name, PDF, "application/pdf")
    claim = claim_next_job(device.pk)
    for step in ("RECEIVED", "SPOOLED", "PRINTED"):
        events.record_device_event(
            device,
            job.pk,
            {
                "event_id": str(uuid.uuid4()),
                "type": step,
                "claim_id": str(claim.claim_id),
                "occurred_at": "2026-01-01T00:00:00Z",
            },
        )
    return job


def test_a_node_killed_while_sending_leaves_the_delivery_to_another_node(
    node, receiver, loopback_allowed
):
    endpoint, secret = endpoints.create_endpoint("acme", receiver.url, events=["job.printed"])
    receiver.secrets.append(secret)
    receiver.hold = threading.Event()
    receiver.hold.set()  # the first attempt gets no answer: the node dies while sending
    job = print_a_job()
    (row,) = WebhookDelivery.objects.filter(endpoint=endpoint)

    first = node("a")
    wait_until(lambda: receiver.started, 60, message=f"node a sending ({first.log_path})")
    first.kill()
    receiver.hold.clear()
    sending = WebhookDelivery.objects.get(pk=row.pk)
    assert sending.status == DeliveryStatus.SENDING
    # The dead sender's lease runs out: moved back by its length rather than waited for.
    WebhookDelivery.objects.filter(pk=row.pk).update(
        locked_until=sending.locked_until - timedelta(seconds=outbox_taking.LEASE_SECONDS)
    )

    second = node("b")
    wait_until(lambda: receiver.ok(), 60, message=f"node b delivering ({second.log_path})")
    (delivered,) = receiver.ok()
    assert delivered.webhook_id == row.event_id  # the same event: a receiver drops a duplicate
    assert delivered.json["type"] == "job.printed"
    assert delivered.json["data"]["job"]["id"] == str(job.pk)
    wait_until(
        lambda: WebhookDelivery.objects.filter(pk=row.pk, status=DeliveryStatus.DELIVERED),
        10,
        message="the answer recorded",
    )
    row.refresh_from_db()
    assert row.attempts == 2 and row.last_status_code == 200
    assert receiver.overlaps == []


def test_a_running_node_delivers_within_two_seconds_of_a_commit_made_elsewhere(
    node, receiver, loopback_allowed, services
):
    """The commit is made here (another process, as a web node would); the node's sender is
    woken over Redis (the pub/sub layer the example project uses)."""
    endpoint, secret = endpoints.create_endpoint("acme", receiver.url)
    receiver.secrets.append(secret)
    runtime = node("a")
    wait_until(lambda: "webhook_sender_started" in runtime.log(), 60, message="the sender started")
    layer = {
        "BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer",
        "CONFIG": {"hosts": [{"address": services.redis_url, "socket_timeout": None}]},
    }
    with override_settings(CHANNEL_LAYERS={"default": layer}):
        for _ in range(3):
            count = len(receiver.ok())
            committed = time.monotonic()
            endpoints.send_test(endpoint)
            wait_until(lambda c=count: len(receiver.ok()) > c, 10, message="the test delivery")
            assert receiver.ok()[-1].at - committed < 2
