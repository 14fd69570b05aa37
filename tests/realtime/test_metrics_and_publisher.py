"""The wakeup publisher's bound and counters, and qprint's lines on ``/metrics``."""

from __future__ import annotations

import uuid

from qprint import api, connection, metrics, publisher
from qprint.publisher import ChannelLayerPublisher


class FailingLayer:
    async def group_send(self, group, message):
        raise ConnectionError("redis is down")


def test_full_queue_drops_and_counts_without_blocking(monkeypatch):
    monkeypatch.setattr(publisher, "get_channel_layer", lambda: object())
    pub = ChannelLayerPublisher(queue_size=2)
    monkeypatch.setattr(pub, "_ensure_thread", lambda: None)  # nothing drains the queue
    for device_id in range(5):
        pub.publish("acme", device_id, "job")
    assert pub.queue.qsize() == 2
    assert pub.counters.queued == 2
    assert pub.counters.dropped_queue_full == 3


def test_layer_error_drops_and_counts(monkeypatch, caplog):
    from tests.processes import wait_until

    monkeypatch.setattr(publisher, "get_channel_layer", lambda: FailingLayer())
    pub = ChannelLayerPublisher(queue_size=10)
    pub.publish("acme", 7, "job")
    wait_until(lambda: pub.counters.dropped_layer_error == 1, 10, message="dropped")
    assert pub.counters.published == 0
    assert "wake_dropped tenant=acme device=7 cause=layer_error" in caplog.text


def test_metrics_show_live_connections_by_node_and_publisher_counters(transactional_db):
    device, _ = api.create_device("acme", "desk-metrics")
    connection.take(device.pk, uuid.uuid4(), "node-x", 20)
    text = metrics.render()
    assert 'qprint_device_connections{node="node-x"} 1' in text
    assert "# TYPE qprint_wakeups_dropped_total counter" in text
    assert 'cause="queue_full"' in text and "qprint_sockets_open{" in text


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
    apps.get_app_config("qprint")._install_realtime()
    assert gauges.read("connections", "node-x") == 1
    assert gauges.read("connections", "node-y") == 1


def test_system_checks_name_bad_socket_settings(settings):
    from django.core import checks

    settings.QPRINT = {"MAX_FRAME_BYTES": 0, "SOCKET_DB_THREADS": "8", "DRAIN_SPREAD_SECONDS": -1}
    messages = [m.msg for m in checks.run_checks() if m.id == "qprint.E003"]
    assert any("MAX_FRAME_BYTES" in m for m in messages)
    assert any("SOCKET_DB_THREADS" in m for m in messages)
    assert any("DRAIN_SPREAD_SECONDS" in m for m in messages)
