"""The node registry: start, heartbeat, recovery from a wrong LOST, drain request and cancel."""

import pytest

from qcluster import identity, nodes
from qcluster.models import ClusterNode
from tests.qcluster.conftest import make_node


@pytest.fixture
def node(monkeypatch):
    monkeypatch.setenv("QQQ_NODE_ROLES", "web, worker")
    monkeypatch.setenv("QQQ_ZONE", "eu-1a")
    monkeypatch.setenv("QQQ_POD_NAME", "app-7f9c")
    monkeypatch.setenv("QQQ_APP_VERSION", "2.3.4")
    return identity.read_identity("node-1")


def test_identity_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv("QQQ_NODE_ID", "pod-a")
    monkeypatch.setenv("HOSTNAME", "host-a")
    monkeypatch.setenv("QQQ_NODE_ROLES", "web,worker")
    monkeypatch.setenv("QQQ_K8S_NODE_NAME", "k8s-3")
    monkeypatch.setenv("QQQ_DEPLOYMENT", "printing")
    monkeypatch.setenv("QQQ_APP_VERSION", "9.9")

    me = identity.read_identity()

    assert (me.node_id, me.roles, me.k8s_node_name, me.deployment) == (
        "pod-a",
        ("web", "worker"),
        "k8s-3",
        "printing",
    )
    assert me.version == "9.9"
    monkeypatch.delenv("QQQ_NODE_ID")
    assert identity.read_identity().node_id == "host-a"
    assert identity.read_identity("override").node_id == "override"


def test_app_version_setting_wins_over_the_environment(monkeypatch, settings):
    monkeypatch.setenv("QQQ_APP_VERSION", "9.9")
    settings.QCLUSTER = {"APP_VERSION": "1.0-release"}

    assert identity.read_identity("n").version == "1.0-release"


def test_start_registers_the_node_up_with_its_placement(db, node):
    nodes.register_start(node, nodes.LiveFields(pid=42, connections=3))

    row = ClusterNode.objects.get(node_id="node-1")
    assert (row.status, row.roles, row.zone, row.pod_name, row.version) == (
        "UP",
        "web,worker",
        "eu-1a",
        "app-7f9c",
        "2.3.4",
    )
    assert (row.pid, row.connections, row.drain_requested) == (42, 3, False)
    assert row.started_at and row.heartbeat_at


def test_restart_clears_a_drain_request_and_sets_up(db, node):
    make_node("node-1", status="STOPPED", drain_requested=True, drain_requested_by="ops")

    nodes.register_start(node, nodes.LiveFields())

    row = ClusterNode.objects.get(node_id="node-1")
    assert (row.status, row.drain_requested, row.drain_requested_by) == ("UP", False, "")


def test_heartbeat_writes_live_fields_and_reports_drain_request(db, node):
    make_node("node-1", age_seconds=5)
    before = ClusterNode.objects.get(node_id="node-1").heartbeat_at
    nodes.request_drain("node-1", by="alice")

    beat = nodes.heartbeat(node, nodes.LiveFields(running_tasks=2, connections=7))

    assert (beat.status, beat.drain_requested, beat.recovered_from_lost) == ("UP", True, False)
    row = ClusterNode.objects.get(node_id="node-1")
    assert row.heartbeat_at > before
    assert (row.running_tasks, row.connections) == (2, 7)


def test_node_wrongly_marked_lost_is_up_again_on_its_next_heartbeat(db, node):
    make_node("node-1", status="LOST", age_seconds=100)

    beat = nodes.heartbeat(node, nodes.LiveFields())

    assert (beat.status, beat.recovered_from_lost) == ("UP", True)
    assert nodes.node_status("node-1") == "UP"


def test_heartbeat_of_a_deleted_row_registers_the_node_again(db, node):
    beat = nodes.heartbeat(node, nodes.LiveFields())

    assert beat.recreated and nodes.node_status("node-1") == "UP"


def test_drain_request_records_who_asked_and_cancel_returns_to_up(db):
    make_node("n")

    assert nodes.request_drain("n", by="alice") is True
    assert nodes.request_drain("n", by="bob") is False  # already requested
    row = ClusterNode.objects.get(node_id="n")
    assert (row.drain_requested, row.drain_requested_by) == (True, "alice")
    assert row.drain_requested_at is not None
    nodes.mark_draining("n")
    assert nodes.node_status("n") == "DRAINING"

    assert nodes.cancel_drain("n", by="carol") is True

    row = ClusterNode.objects.get(node_id="n")
    assert (row.status, row.drain_requested, row.drain_requested_by) == ("UP", False, "")
    assert nodes.cancel_drain("n", by="carol") is False


def test_a_drain_started_by_a_signal_cannot_be_asked_for_nor_cancelled(db):
    """docs/CLUSTER.md: a node DRAINING after SIGTERM (no request on its row) is going away. A
    request there is refused, so no cancel can mark it UP."""
    make_node("n1", status="DRAINING")

    assert nodes.request_drain("n1", by="ops") is False
    assert nodes.cancel_drain("n1", by="ops") is False
    row = ClusterNode.objects.get(node_id="n1")
    assert (row.status, row.drain_requested) == ("DRAINING", False)


def test_stopped_or_lost_nodes_cannot_be_drained(db):
    make_node("stopped", status="STOPPED")
    make_node("lost", status="LOST")

    assert nodes.request_drain("stopped", by="alice") is False
    assert nodes.request_drain("lost", by="alice") is False


def test_node_status_of_an_unknown_node_is_none(db):
    assert nodes.node_status("nobody") is None
