"""The runtime in-process, one cycle at a time (``--once``): tasks, gauges, recovery, drain."""

import logging

import pytest
from django.core.management import call_command

from qcluster import gauges, leases, nodes, signals, tasks
from qcluster.identity import read_identity
from qcluster.models import ClusterNode
from qcluster.runtime import ClusterRuntime
from tests.qcluster.conftest import expire_lease, make_node


@pytest.fixture
def no_other_tasks(monkeypatch):
    """Only the tasks a test registers run (not those of other installed apps)."""
    monkeypatch.setattr(tasks, "_registry", {})


def run_once(node_id: str) -> int:
    return ClusterRuntime(read_identity(node_id), once=True).run()


def test_once_registers_the_node_takes_the_sweeper_lease_and_exits_0(
    transactional_db, no_other_tasks
):
    assert run_once("a") == 0

    row = ClusterNode.objects.get(node_id="a")
    assert row.status == "UP" and row.heartbeat_at is not None and row.pid
    assert leases.holder(leases.SWEEPER_LEASE).holder_node_id == "a"


def test_command_once_with_node_id(transactional_db, no_other_tasks):
    call_command("cluster_runtime", "--once", "--node-id", "cli-node")

    assert nodes.node_status("cli-node") == "UP"


def test_an_identity_its_row_cannot_hold_is_a_command_error(db, monkeypatch):
    """A node id or version longer than its column is named before anything runs, never a
    traceback nor a database error taken for an outage."""
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="node_id is 201 characters long, at most 200"):
        call_command("cluster_runtime", "--once", "--node-id", "x" * 201)
    monkeypatch.setenv("QQQ_APP_VERSION", "v" * 101)
    with pytest.raises(CommandError, match="version is 101 characters long, at most 100"):
        call_command("cluster_runtime", "--once", "--node-id", "ok")
    assert not ClusterNode.objects.exists()


def test_singleton_task_runs_only_on_the_node_holding_its_lease(transactional_db, no_other_tasks):
    from datetime import timedelta

    runs: list[str] = []
    tasks.register("probe", timedelta(seconds=60), lambda: runs.append("ran"))
    leases.as_node("b").try_acquire("task:probe", 60)

    run_once("a")
    assert runs == []

    expire_lease("task:probe")
    run_once("a")
    assert runs == ["ran"]
    assert leases.holder("task:probe").holder_node_id == "a"


def test_connections_gauge_is_written_and_a_failing_gauge_does_not_stop_the_heartbeat(
    transactional_db, no_other_tasks, caplog, monkeypatch
):
    # monkeypatch puts back the gauge the installed apps registered (qprint's connection count).
    monkeypatch.setitem(gauges._gauges, "connections", lambda node_id: 17 if node_id == "a" else 0)
    run_once("a")
    assert ClusterNode.objects.get(node_id="a").connections == 17

    def broken(node_id):
        raise RuntimeError("socket table unavailable")

    monkeypatch.setitem(gauges._gauges, "connections", broken)
    with caplog.at_level(logging.ERROR, logger="qcluster.gauges"):
        assert run_once("a") == 0
    assert ClusterNode.objects.get(node_id="a").connections == 0
    assert any("gauge_failed name=connections node=a" in r.getMessage() for r in caplog.records)


def test_node_marked_lost_while_slow_sets_itself_up_and_warns(
    transactional_db, no_other_tasks, caplog
):
    runtime = ClusterRuntime(read_identity("a"))
    runtime._register()
    ClusterNode.objects.filter(node_id="a").update(status="LOST")

    with caplog.at_level(logging.WARNING, logger="qcluster.runtime"):
        runtime._cycle()  # its next heartbeat

    assert nodes.node_status("a") == "UP"
    assert any("node_recovered node=a was=LOST" in r.getMessage() for r in caplog.records)


def test_drain_request_is_acted_on_at_the_next_heartbeat(transactional_db, no_other_tasks):
    draining: list[str] = []

    def on_draining(sender, node_id, **kwargs):
        draining.append(node_id)

    run_once("a")
    leases.as_node("a").try_acquire("task:other", 60)
    nodes.request_drain("a", by="alice")
    signals.node_draining.connect(on_draining)
    try:
        assert run_once("a") == 0
    finally:
        signals.node_draining.disconnect(on_draining)

    assert draining == ["a"]
    assert nodes.node_status("a") == "STOPPED"
    assert not ClusterNode.objects.get(node_id="a").drain_requested
    assert leases.holder("task:other") is None and leases.holder(leases.SWEEPER_LEASE) is None


def test_once_sweeper_acts_only_after_holding_its_lease_for_lost_after(
    transactional_db, no_other_tasks
):
    from tests.qcluster.conftest import db_now_minus, set_cluster_settings

    set_cluster_settings(heartbeat_seconds=1, lost_after_seconds=3)
    make_node("dead", age_seconds=60)

    run_once("a")  # takes the sweeper lease: not armed yet
    assert nodes.node_status("dead") == "UP"

    from qcluster.models import ClusterLease

    ClusterLease.objects.filter(name=leases.SWEEPER_LEASE).update(acquired_at=db_now_minus(4))
    run_once("a")
    assert nodes.node_status("dead") == "LOST"


def test_cluster_drain_command_requests_and_cancels_a_drain(transactional_db, no_other_tasks):
    from io import StringIO

    from django.core.management.base import CommandError

    run_once("a")
    out = StringIO()

    call_command("cluster_drain", "--node-id", "a", stdout=out)
    assert ClusterNode.objects.get(node_id="a").drain_requested_by == "cluster_drain"
    assert "drain_request node=a status=UP new=true" in out.getvalue()

    call_command("cluster_drain", "--node-id", "a", "--cancel", stdout=out)
    assert ClusterNode.objects.get(node_id="a").drain_requested is False
    with pytest.raises(CommandError, match="Unknown node"):
        call_command("cluster_drain", "--node-id", "nobody")
