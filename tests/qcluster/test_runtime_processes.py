"""``cluster_runtime`` as real processes on PostgreSQL: loss, sweeper hand-over, drain, stop.

heartbeat_seconds=1 and lost_after_seconds=3 keep each test within seconds. Waits are for
conditions with deadlines; the time bounds docs/CLUSTER.md promises are checked on database
timestamps.
"""

import os
import signal
from datetime import timedelta

import pytest

from qcluster import leases
from qcluster.models import ClusterAlert, ClusterLease, ClusterNode
from tests.processes import ManagedProcess, free_port, manage
from tests.qcluster.conftest import set_cluster_settings
from tests.waiting import wait_until

HEARTBEAT, LOST_AFTER = 1, 3
START_TIMEOUT = 30


@pytest.fixture
def runtime(subprocess_env, fast_cluster_settings):
    """Start ``cluster_runtime --node-id NAME`` processes; all are killed at the end."""
    started: list[ManagedProcess] = []

    def start(node_id: str, grace: int = 5) -> ManagedProcess:
        env = {**subprocess_env, "QCLUSTER_DRAIN_GRACE_SECONDS": str(grace)}
        process = ManagedProcess(
            f"runtime-{node_id}", manage("cluster_runtime", "--node-id", node_id), env
        ).start()
        started.append(process)
        return process

    yield start
    for process in started:
        process.kill()


def status(node_id: str) -> str | None:
    return ClusterNode.objects.filter(node_id=node_id).values_list("status", flat=True).first()


def sweeper_holder() -> str | None:
    lease = leases.holder(leases.SWEEPER_LEASE)
    return lease.holder_node_id if lease else None


def wait_status(node_id: str, expected: str, timeout: float = 20) -> None:
    wait_until(lambda: status(node_id) == expected, timeout, message=f"{node_id} {expected}")


def wait_log(process: ManagedProcess, text: str, timeout: float = 20) -> None:
    wait_until(lambda: text in process.log(), timeout, message=f"{text!r} in {process.name} log")


def heartbeats_after(node_id: str, count: int) -> None:
    """Wait until ``node_id`` has written ``count`` more heartbeats."""
    seen = [ClusterNode.objects.get(node_id=node_id).heartbeat_at]

    def advanced() -> bool:
        now = ClusterNode.objects.get(node_id=node_id).heartbeat_at
        if now != seen[-1]:
            seen.append(now)
        return len(seen) > count

    wait_until(advanced, 10 * count, message=f"{count} heartbeats of {node_id}")


def lost_alerts(node_id: str) -> list[ClusterAlert]:
    return list(ClusterAlert.objects.filter(code="cluster.node.lost", node_id=node_id))


@pytest.mark.services
@pytest.mark.slow
def test_killed_node_is_lost_within_lost_after_plus_two_heartbeats_with_one_alert(runtime):
    sweeper = runtime("node-1")
    wait_until(lambda: sweeper_holder() == "node-1", START_TIMEOUT, message="node-1 sweeper")
    victim, survivor = runtime("node-2"), runtime("node-3")
    wait_status("node-2", "UP", START_TIMEOUT)
    wait_status("node-3", "UP", START_TIMEOUT)
    wait_log(sweeper, "sweeper_armed node=node-1")

    victim.kill()
    wait_status("node-2", "LOST")
    heartbeats_after("node-1", 2)  # two more sweeps: still one alert

    [alert] = lost_alerts("node-2")
    last_heartbeat = ClusterNode.objects.get(node_id="node-2").heartbeat_at
    waited = alert.raised_at - last_heartbeat
    assert timedelta(seconds=LOST_AFTER) <= waited <= timedelta(seconds=LOST_AFTER + 2 * HEARTBEAT)
    assert (status("node-1"), status("node-3")) == ("UP", "UP")
    assert "node_lost node=node-2" in sweeper.log()
    assert survivor.alive() and ClusterAlert.objects.count() == 1


@pytest.mark.services
@pytest.mark.slow
def test_killed_sweeper_is_replaced_and_lost_only_after_the_new_sweeper_watched(runtime):
    old = runtime("node-1")
    wait_until(lambda: sweeper_holder() == "node-1", START_TIMEOUT, message="node-1 sweeper")
    runtime("node-2"), runtime("node-3")
    wait_status("node-2", "UP", START_TIMEOUT)
    wait_status("node-3", "UP", START_TIMEOUT)

    old.kill()
    wait_until(lambda: sweeper_holder() in ("node-2", "node-3"), 20, message="a new sweeper")
    wait_status("node-1", "LOST")

    takeover = ClusterLease.objects.get(name=leases.SWEEPER_LEASE).acquired_at
    [alert] = lost_alerts("node-1")
    assert alert.raised_at - takeover >= timedelta(seconds=LOST_AFTER)
    assert leases.holder(leases.SWEEPER_LEASE).holder_node_id != "node-1"


@pytest.mark.services
@pytest.mark.slow
def test_sigterm_drains_then_stops_with_exit_0_holding_no_lease(runtime):
    node = runtime("node-1")
    wait_until(lambda: sweeper_holder() == "node-1", START_TIMEOUT, message="node-1 sweeper")

    node.send(signal.SIGTERM)

    assert node.wait(20) == 0
    log = node.log()
    assert log.index("node_draining node=node-1 reason=signal") < log.index(
        "node_stopped node=node-1"
    )
    assert status("node-1") == "STOPPED"
    assert not ClusterLease.objects.filter(holder_node_id="node-1").exists()


@pytest.mark.services
@pytest.mark.slow
def test_admin_drain_drains_the_running_node_and_cancel_returns_it_to_up(runtime, admin_client):
    node = runtime("node-1", grace=6)
    wait_until(lambda: sweeper_holder() == "node-1", START_TIMEOUT, message="node-1 sweeper")

    def admin_action(action: str) -> None:
        # "confirmed": the drain confirmation page's own post (cancel needs none).
        response = admin_client.post(
            "/admin/qcluster/clusternode/",
            {"action": action, "_selected_action": ["node-1"], "confirmed": "yes"},
        )
        assert response.status_code == 302

    admin_action("drain_nodes")
    wait_status("node-1", "DRAINING")
    wait_until(lambda: sweeper_holder() is None, 10, message="the sweeper lease released")
    assert ClusterNode.objects.get(node_id="node-1").drain_requested_by == "admin"

    admin_action("cancel_drain")
    wait_log(node, "node_up node=node-1 reason=drain_cancelled")
    heartbeats_after("node-1", 2)
    assert status("node-1") == "UP" and node.alive()
    wait_until(lambda: sweeper_holder() == "node-1", 20, message="node-1 sweeper again")

    admin_action("drain_nodes")
    wait_status("node-1", "DRAINING")
    assert node.wait(30) == 0
    assert status("node-1") == "STOPPED"
    assert not ClusterLease.objects.filter(holder_node_id="node-1").exists()


@pytest.mark.slow
def test_unreachable_database_is_retried_with_backoff_until_told_to_stop():
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env.update(
        {
            "DJANGO_SETTINGS_MODULE": "example_project.settings",
            "DATABASE_URL": f"postgres://postgres@127.0.0.1:{free_port()}/nowhere",
            "PYTHONUNBUFFERED": "1",
        }
    )
    node = ManagedProcess("runtime-nodb", manage("cluster_runtime", "--node-id", "n"), env).start()
    try:
        wait_log(node, "attempt=2 retry_in=1.0s", START_TIMEOUT)
        assert node.alive()
        assert "database_unavailable node=n doing=register attempt=1 retry_in=0.5s" in node.log()

        node.send(signal.SIGTERM)

        assert node.wait(20) != 0
        assert "exit_unregistered node=n reason=database_unavailable" in node.log()
    finally:
        node.kill()


@pytest.mark.services
@pytest.mark.slow
def test_sigterm_with_nothing_running_stops_before_the_next_heartbeat(runtime):
    """A signal's drain stops as soon as nothing runs: it does not sleep out the heartbeat
    (here 60 s; the grace 30 s) before it records STOPPED."""
    set_cluster_settings(heartbeat_seconds=60, lost_after_seconds=180)
    node = runtime("node-1", grace=30)
    wait_until(lambda: sweeper_holder() == "node-1", START_TIMEOUT, message="node-1 sweeper")
    wait_log(node, "worker_started node=node-1")

    node.send(signal.SIGTERM)

    assert node.wait(20) == 0  # well before the next heartbeat and the grace
    assert "node_stopped node=node-1 reason=signal abandoned_tasks=0" in node.log()
    assert status("node-1") == "STOPPED"


@pytest.mark.services
@pytest.mark.slow
def test_stuck_database_call_cannot_keep_the_node_alive_past_the_grace(runtime, live_database_url):
    import psycopg

    node = runtime("node-1", grace=2)
    wait_until(lambda: sweeper_holder() == "node-1", START_TIMEOUT, message="node-1 sweeper")
    with (
        psycopg.connect(live_database_url) as blocker,
        psycopg.connect(live_database_url, autocommit=True) as observer,
    ):
        # Hold the node's row: its next heartbeat UPDATE waits for this lock, without end.
        blocker.execute("SELECT 1 FROM cluster_node WHERE node_id = 'node-1' FOR UPDATE")
        wait_until(
            lambda: observer.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                " AND query LIKE '%%\"cluster_node\"%%'"
            ).fetchone()[0],
            10,
            message="the heartbeat waiting on the row lock",
        )

        node.send(signal.SIGTERM)

        assert node.wait(20) != 0
        blocker.rollback()
    assert "exit_forced node=node-1 reason=grace_expired grace_seconds=2" in node.log()


@pytest.mark.services
@pytest.mark.slow
def test_node_paused_past_lost_after_is_lost_then_up_again_on_its_next_heartbeat(runtime):
    sweeper = runtime("node-1")
    wait_until(lambda: sweeper_holder() == "node-1", START_TIMEOUT, message="node-1 sweeper")
    slow = runtime("node-2")
    wait_status("node-2", "UP", START_TIMEOUT)
    wait_log(sweeper, "sweeper_armed node=node-1")

    slow.send(signal.SIGSTOP)
    try:
        wait_status("node-2", "LOST")
    finally:
        slow.send(signal.SIGCONT)
    wait_status("node-2", "UP")

    wait_log(slow, "node_recovered node=node-2 was=LOST")
    assert len(lost_alerts("node-2")) == 1
    assert slow.alive()


@pytest.mark.services
@pytest.mark.slow
def test_database_stall_longer_than_lost_after_evicts_no_node(runtime, live_database_url):
    import time

    import psycopg

    first = runtime("node-1")
    wait_until(lambda: sweeper_holder() == "node-1", START_TIMEOUT, message="node-1 sweeper")
    nodes = [first, runtime("node-2"), runtime("node-3")]
    wait_status("node-2", "UP", START_TIMEOUT)
    wait_status("node-3", "UP", START_TIMEOUT)
    wait_log(first, "sweeper_armed node=node-1")

    def armed_count() -> int:
        return sum(node.log().count("sweeper_armed") for node in nodes)

    armed_before = armed_count()
    with psycopg.connect(live_database_url) as staller:
        # Every heartbeat waits behind this lock, as in a stalled database.
        staller.execute("LOCK TABLE cluster_node IN EXCLUSIVE MODE")
        stalled_at = time.monotonic()
        wait_until(
            lambda: time.monotonic() - stalled_at > LOST_AFTER + 2 * HEARTBEAT,
            30,
            message="a stall longer than lost_after_seconds",
        )
        staller.rollback()
    # The watch restarted: the stalled sweeper disarmed, or its lease expired and another node
    # took it; either way a sweeper arms again only a full lost_after_seconds after the stall.
    wait_until(lambda: armed_count() > armed_before, 20, message="a sweeper armed again")
    heartbeats_after(sweeper_holder(), 2)

    assert set(ClusterNode.objects.values_list("status", flat=True)) == {"UP"}
    assert list(ClusterAlert.objects.values_list("code", flat=True)) == []  # not even a suspicion
