"""The sweep: LOST once, with its alert, signal, log and mail; never a mass eviction."""

import dataclasses
import logging

import pytest
from django.core import mail

from qcluster import leases, runtime_config, signals
from qcluster.models import ClusterAlert, ClusterNode
from qcluster.sweeper import SweeperWatch, sweep
from tests.qcluster.conftest import make_node

CONFIG = runtime_config.RuntimeConfig(
    heartbeat_seconds=1, lost_after_seconds=3, retain_stopped_days=7, alert_on_lost=True
)


@pytest.fixture
def lost_signals():
    received = []

    def on_lost(sender, node_id, last_heartbeat, **kwargs):
        received.append((node_id, last_heartbeat))

    signals.node_lost.connect(on_lost)
    yield received
    signals.node_lost.disconnect(on_lost)


def test_node_past_lost_after_is_marked_lost_once_with_alert_signal_log_and_mail(
    transactional_db, lost_signals, caplog, settings
):
    settings.ADMINS = [("Operations", "ops@example.com")]
    make_node("sweeper")
    dead = make_node("dead", age_seconds=10)
    make_node("alive", age_seconds=1)
    leases.as_node("dead").try_acquire("task:report", 60)

    with caplog.at_level(logging.ERROR, logger="qcluster.sweeper"):
        first = sweep("sweeper", CONFIG)
        second = sweep("sweeper", CONFIG)

    assert first.lost == ["dead"] and second.lost == []
    statuses = dict(ClusterNode.objects.values_list("node_id", "status"))
    assert statuses == {"sweeper": "UP", "dead": "LOST", "alive": "UP"}
    alert = ClusterAlert.objects.get()
    assert (alert.code, alert.node_id, alert.acknowledged_at) == ("cluster.node.lost", "dead", None)
    assert lost_signals == [("dead", dead.heartbeat_at)]
    assert [r.getMessage().split()[0] for r in caplog.records] == ["node_lost"]
    assert "node=dead" in caplog.records[0].getMessage()
    assert len(mail.outbox) == 1 and "dead" in mail.outbox[0].subject
    assert leases.holder("task:report") is None


def test_no_mail_when_alert_on_lost_is_false(transactional_db, settings):
    settings.ADMINS = [("Operations", "ops@example.com")]
    make_node("sweeper")
    make_node("dead", age_seconds=10)
    quiet = dataclasses.replace(CONFIG, alert_on_lost=False)

    assert sweep("sweeper", quiet).lost == ["dead"]
    assert mail.outbox == []
    assert ClusterAlert.objects.filter(code="cluster.node.lost").count() == 1


def test_draining_node_that_stops_heartbeating_is_lost_too(db):
    make_node("sweeper")
    make_node("draining", status="DRAINING", age_seconds=10)

    assert sweep("sweeper", CONFIG).lost == ["draining"]


def test_sweeper_never_marks_itself_nor_stopped_nodes(db):
    make_node("sweeper", age_seconds=10)
    make_node("gone", status="STOPPED", age_seconds=10)

    assert sweep("sweeper", CONFIG).lost == []
    assert ClusterAlert.objects.count() == 0


def test_more_than_half_overdue_marks_none_and_raises_one_suspicion_alert(db, caplog):
    make_node("sweeper")
    for name in ("a", "b", "c"):
        make_node(name, age_seconds=10)

    with caplog.at_level(logging.ERROR, logger="qcluster.sweeper"):
        first = sweep("sweeper", CONFIG)
        second = sweep("sweeper", CONFIG)

    assert first.lost == second.lost == []
    assert sorted(first.mass_suspected) == ["a", "b", "c"]
    assert set(ClusterNode.objects.values_list("status", flat=True)) == {"UP"}
    alerts = list(ClusterAlert.objects.values_list("code", flat=True))
    assert alerts == ["cluster.mass_lost_suspected"]
    assert len([r for r in caplog.records if "mass_lost_suspected" in r.getMessage()]) == 1
    assert mail.outbox == []


def test_suspicion_ends_when_the_overdue_nodes_heartbeat_again(db):
    make_node("sweeper")
    for name in ("a", "b", "c"):
        make_node(name, age_seconds=10)
    sweep("sweeper", CONFIG)
    ClusterNode.objects.filter(node_id__in=["a", "b"]).update(
        heartbeat_at=make_node("x").heartbeat_at
    )

    result = sweep("sweeper", CONFIG)

    assert result.lost == ["c"]


def test_exactly_half_overdue_is_not_a_mass_loss(db):
    make_node("sweeper")
    make_node("fresh")
    make_node("a", age_seconds=10)
    make_node("b", age_seconds=10)

    assert sorted(sweep("sweeper", CONFIG).lost) == ["a", "b"]


def test_two_node_cluster_loses_its_dead_peer(db):
    make_node("sweeper")
    make_node("peer", age_seconds=10)

    assert sweep("sweeper", CONFIG).lost == ["peer"]


def test_retention_deletes_old_stopped_and_lost_rows_only(db):
    day = 24 * 3600
    make_node("sweeper")
    make_node("old-stopped", status="STOPPED", age_seconds=8 * day)
    make_node("old-lost", status="LOST", age_seconds=8 * day)
    make_node("recent-stopped", status="STOPPED", age_seconds=6 * day)

    result = sweep("sweeper", CONFIG)

    assert result.deleted == 2
    remaining = set(ClusterNode.objects.values_list("node_id", flat=True))
    assert remaining == {"sweeper", "recent-stopped"}


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_watch_arms_only_after_a_full_lost_after_of_holding_the_lease():
    clock = FakeClock()
    watch = SweeperWatch(clock)
    assert not watch.armed(3)
    watch.start()
    clock.now += 2.9
    assert not watch.armed(3)
    clock.now += 0.1
    assert watch.armed(3)


def test_watch_restarts_after_a_late_heartbeat_of_the_sweeper_itself():
    clock = FakeClock()
    watch = SweeperWatch(clock)
    watch.start()
    clock.now += 10
    assert watch.heartbeat(gap_seconds=1.1, heartbeat_seconds=1) is False
    assert watch.armed(3)

    assert watch.heartbeat(gap_seconds=5, heartbeat_seconds=1) is True

    assert not watch.armed(3)
    clock.now += 3
    assert watch.armed(3)


def test_watch_stops_when_the_lease_is_lost():
    clock = FakeClock()
    watch = SweeperWatch(clock)
    watch.start()
    clock.now += 10
    watch.stop()
    assert not watch.armed(3)
