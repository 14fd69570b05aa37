"""The wakeup publisher's bound and counters, and qprint's lines on ``/metrics``."""

from __future__ import annotations

import asyncio
import os
import subprocess
import uuid
from datetime import timedelta

import pytest
from channels.db import database_sync_to_async
from django.db.models.functions import Now

from qprint import api
from qprint.core.publisher import GroupPublisher
from qprint.domain import connection
from qprint.metrics import collectors
from qprint.models import PrintJob
from qprint.realtime import publisher
from qprint.realtime.publisher import ChannelLayerPublisher
from tests.exposition import samples, value


class FailingLayer:
    async def group_send(self, group, message):
        raise ConnectionError("redis is down")


def test_full_queue_drops_and_counts_without_blocking(monkeypatch):
    monkeypatch.setattr(publisher, "get_channel_layer", lambda: object())
    groups = GroupPublisher(queue_size=2)
    monkeypatch.setattr(groups, "_ensure_thread", lambda: None)  # nothing drains the queue
    pub = ChannelLayerPublisher(groups)
    for device_id in range(5):
        pub.publish("acme", device_id, "job")
    assert groups.queue.qsize() == 2
    assert pub.counters.queued == 2
    assert pub.counters.dropped_queue_full == 3


def test_layer_error_drops_and_counts(monkeypatch, caplog):
    from tests.waiting import wait_until

    monkeypatch.setattr(publisher, "get_channel_layer", lambda: FailingLayer())
    pub = ChannelLayerPublisher(GroupPublisher(queue_size=10, layer=FailingLayer))
    pub.publish("acme", 7, "job")
    line = "wake_dropped tenant=acme device=7 cause=layer_error"
    # The publisher's thread counts the drop, then logs it: wait for both.
    wait_until(
        lambda: pub.counters.dropped_layer_error == 1 and line in caplog.text, 10, message="dropped"
    )
    assert pub.counters.published == 0


def test_wakeups_and_notices_leave_through_one_queue(monkeypatch):
    """The webhooks' notices share the wakeups' bounded queue and thread (one publisher)."""
    from qprint.core import publisher as core_publisher
    from qprint.webhooks import notify

    groups = GroupPublisher(queue_size=3)
    monkeypatch.setattr(groups, "_ensure_thread", lambda: None)
    monkeypatch.setattr(core_publisher, "_process", groups)
    for module in (publisher, notify):
        monkeypatch.setattr(module, "get_channel_layer", lambda: object())
    ChannelLayerPublisher().publish("acme", 7, "job")
    notify.publish_deliveries()
    notify.publish_job(uuid.UUID(int=1))
    notify.publish_deliveries()  # the fourth: the queue is full, dropped
    sent = [groups.queue.get_nowait()[:2] for _ in range(groups.queue.qsize())]
    assert sent == [
        ("qprint.device.7", sent[0][1]),
        ("qprint.webhooks", {"type": "qprint.webhooks_due"}),
        (
            f"qprint.job.{uuid.UUID(int=1)}",
            {"type": "qprint.job_changed", "job_id": str(uuid.UUID(int=1))},
        ),
    ]
    assert sent[0][1]["type"] == "qprint.wake"


def test_metrics_show_live_connections_by_node_and_publisher_counters(transactional_db):
    device, _ = api.create_device("acme", "desk-metrics")
    connection.take(device.pk, uuid.uuid4(), "node-x", 20)
    api.submit_job("acme", "desk-metrics", b"%PDF-1.4", "application/pdf")
    text = collectors.render()
    assert value(text, "qprint_device_connections", node="node-x") == 1
    assert value(text, "qprint_jobs", status="QUEUED") == 1
    assert value(text, "qprint_jobs", status="PRINTED") == 0
    assert value(text, "qprint_oldest_queued_job_age_seconds") >= 0
    # The device holds a live connection: it is not offline.
    assert value(text, "qprint_devices_offline_with_queued_jobs") == 0
    assert "# TYPE qprint_wakeups_dropped_total counter" in text
    assert value(text, "qprint_wakeups_dropped_total", cause="queue_full") is not None
    assert value(text, "qprint_sockets_open") is not None


def test_devices_offline_with_queued_jobs_and_the_oldest_queued_age(transactional_db):
    api.create_device("acme", "desk-off")
    api.submit_job("acme", "desk-off", b"%PDF-1.4", "application/pdf")
    PrintJob.objects.update(created_at=Now() - timedelta(minutes=10))
    text = collectors.render()
    assert value(text, "qprint_devices_offline_with_queued_jobs") == 1
    assert 600 <= value(text, "qprint_oldest_queued_job_age_seconds") < 700


def test_metrics_read_the_overviews_definitions(transactional_db):
    """One figure, one definition: a disabled device's queued jobs wait all the same, on the
    overview and on /metrics alike."""
    from qprint.domain import overview

    for name in ("desk-on", "desk-disabled"):
        api.create_device("acme", name)
        api.submit_job("acme", name, b"%PDF-1.4", "application/pdf")
    api.disable_device(api.get_device("acme", "desk-disabled"))
    text = collectors.render()
    _rows, total = overview.offline_devices_with_queued_jobs()
    assert value(text, "qprint_devices_offline_with_queued_jobs") == total == 2
    PrintJob.objects.update(created_at=Now() - timedelta(minutes=10))
    text = collectors.render()
    oldest = overview.oldest_queued_job()
    assert 600 <= value(text, "qprint_oldest_queued_job_age_seconds") <= oldest["age_seconds"]


def test_process_figures_carry_node_and_pid(transactional_db):
    from qcluster import identity

    text = collectors.render()
    labels = [ls for n, ls, _ in samples(text) if n == "qprint_wake_queue_depth"]
    assert labels == [{"node": identity.node_id(), "pid": str(os.getpid())}]


def test_connections_gauge_counts_live_rows_of_the_node(transactional_db):
    first, _ = api.create_device("acme", "desk-1")
    second, _ = api.create_device("acme", "desk-2")
    connection.take(first.pk, uuid.uuid4(), "node-x", 20)
    connection.take(second.pk, uuid.uuid4(), "node-y", 20)
    expired = uuid.uuid4()
    third, _ = api.create_device("acme", "desk-3")
    connection.take(third.pk, expired, "node-x", -1)  # a lease already past
    from django.apps import apps

    from qcluster import gauges

    assert connection.live_connections_of_node("node-x") == 1
    # What qprint registers at start-up (other tests may have replaced the gauge since).
    apps.get_app_config("qprint")._register_with_cluster()
    assert gauges.read("connections", "node-x") == 1
    assert gauges.read("connections", "node-y") == 1


def test_system_checks_name_bad_socket_settings(settings):
    from django.core import checks

    settings.QPRINT = {"MAX_FRAME_BYTES": 0, "SOCKET_DB_THREADS": "8", "DRAIN_SPREAD_SECONDS": -1}
    messages = [m.msg for m in checks.run_checks() if m.id == "qprint.E003"]
    assert any("MAX_FRAME_BYTES" in m for m in messages)
    assert any("SOCKET_DB_THREADS" in m for m in messages)
    assert any("DRAIN_SPREAD_SECONDS" in m for m in messages)


@pytest.mark.services
@pytest.mark.slow
async def test_short_lived_process_sends_its_wakeup_before_it_exits(
    subprocess_env, services, tmp_path
):
    """``manage.py qprint_submit`` (or any script) queues a wakeup and exits at once: the exit
    waits for the publisher, so the device is woken now, not at its next heartbeat."""
    from channels_redis.pubsub import RedisPubSubChannelLayer

    from qprint.realtime import bus
    from tests.processes import manage

    device, _ = await database_sync_to_async(api.create_device)("acme", "desk-exit")
    layer = RedisPubSubChannelLayer(hosts=[{"address": services.redis_url}])
    channel = await layer.new_channel()
    await layer.group_add(bus.device_group(device.pk), channel)
    try:
        document = tmp_path / "page.txt"
        document.write_text("hello")
        result = await asyncio.to_thread(
            subprocess.run,
            manage("qprint_submit", "--tenant", "acme", "--device", "desk-exit", str(document)),
            env={**subprocess_env, "REDIS_URL": services.redis_url},
            capture_output=True,
            timeout=60,
        )
        assert result.returncode == 0, result.stderr.decode()
        message = await asyncio.wait_for(layer.receive(channel), 10)
        assert message.pop("sent_at") > 0  # when it was published: the wake latency's start
        # A submission's wakeup says that a job was queued (docs/REALTIME.md, "Wakeups").
        expected = {"type": "qprint.wake", "tenant": "acme", "device_id": device.pk}
        assert message == {**expected, bus.QUEUED: True}
    finally:
        await layer.flush()
