"""``health/`` and ``ready/`` of this node in each state; the metrics; the system checks."""

import pytest
from django.core.checks import run_checks
from django.db import DatabaseError

from qcluster import health, identity, leases
from qcluster.models import ClusterAlert
from tests.exposition import value
from tests.qcluster.conftest import make_node, set_cluster_settings


@pytest.fixture
def this_node(monkeypatch):
    monkeypatch.setenv("QQQ_NODE_ID", "web-7")
    identity.current.cache_clear()
    yield "web-7"
    identity.current.cache_clear()


@pytest.fixture
def heartbeat_10s(db):
    set_cluster_settings(heartbeat_seconds=10, lost_after_seconds=60)


@pytest.mark.parametrize(
    ("age", "status", "http"),
    [(1, "UP", 200), (25, "DEGRADED", 200), (61, "DOWN", 503)],
)
def test_health_follows_the_heartbeat_age(client, this_node, heartbeat_10s, age, status, http):
    make_node(this_node, age_seconds=age)

    response = client.get("/qcluster/health/")

    assert response.status_code == http
    body = response.json()
    assert body["status"] == status
    check = body["checks"]["cluster.node.heartbeat"]
    assert (check["status"], check["node"], check["node_status"]) == (status, this_node, "UP")
    assert body["checks"]["database"]["status"] == "UP"


def test_health_before_the_runtime_registered_is_degraded(client, this_node, db):
    response = client.get("/qcluster/health/")

    assert response.status_code == 200
    assert response.json()["status"] == "DEGRADED"


def test_health_is_down_when_the_database_does_not_answer(client, this_node, monkeypatch):
    """The report is public: it says why in words, never the driver's text (host, port, user)."""
    driver_text = 'connection to server at "10.9.8.7", port 5432 failed: password for "qprint"'

    def broken(node_id):
        raise DatabaseError(driver_text)

    monkeypatch.setattr(health, "_heartbeat_check", broken)

    response = client.get("/qcluster/health/")

    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "DOWN"
    assert body["checks"]["database"] == {
        "status": "DOWN",
        "vendor": body["checks"]["database"]["vendor"],
        "reason": "the database does not answer",
    }
    assert "database: the database does not answer" in body["reason"]
    for leaked in ("10.9.8.7", "5432", "password", "qprint"):
        assert leaked not in response.content.decode()


@pytest.mark.parametrize(
    ("status", "http"),
    [("UP", 200), ("LOST", 200), ("DRAINING", 503), ("STOPPED", 503)],
)
def test_ready_refuses_traffic_while_draining_or_stopped(client, this_node, db, status, http):
    make_node(this_node, status=status)

    response = client.get("/qcluster/ready/")

    assert response.status_code == http
    assert response.json()["ready"] is (http == 200)
    assert response.json()["node_status"] == status


def test_metrics_report_nodes_alerts_and_leases(client, db):
    make_node("a")
    make_node("b", status="LOST")
    ClusterAlert.objects.create(code="cluster.node.lost", node_id="b", message="lost")
    leases.as_node("a").try_acquire("cluster-sweeper", 45)

    response = client.get("/metrics")

    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain; version=0.0.4")
    text = response.content.decode()
    assert value(text, "qcluster_nodes", status="UP") == 1
    assert value(text, "qcluster_nodes", status="LOST") == 1
    assert value(text, "qcluster_alerts_unacknowledged") == 1
    assert value(text, "qcluster_alerts_open", code="cluster.node.lost") == 1
    assert value(text, "qcluster_lease_version", lease="cluster-sweeper", holder="a") == 1
    assert 44 <= value(text, "qcluster_lease_remaining_seconds", lease="cluster-sweeper") <= 45
    assert value(text, "qcluster_lease_held", lease="cluster-sweeper") == 1
    # A lease this code base takes but nobody holds reads 0 (what the alerting rules look for).
    assert value(text, "qcluster_lease_held", lease="task:qprint.expire-jobs") == 0


def test_metrics_negotiate_openmetrics(client, db):
    """Prometheus asks for OpenMetrics in ``Accept``: counters then carry ``_created``."""
    response = client.get("/metrics", HTTP_ACCEPT="application/openmetrics-text; version=1.0.0")
    assert response["Content-Type"].startswith("application/openmetrics-text")
    text = response.content.decode()
    assert text.endswith("# EOF\n")
    assert "qprint_wakeups_published_created{" in text


def _ids(settings_value, settings):
    settings.QCLUSTER = settings_value
    return sorted({m.id for m in run_checks() if m.id.startswith("qcluster.")})


@pytest.mark.parametrize(
    ("value", "ids"),
    [
        ({}, []),
        ([], ["qcluster.E001"]),
        ({"APP_VERSION": ""}, ["qcluster.E002"]),
        ({"APP_VERSION": "v" * 101}, ["qcluster.E002"]),  # longer than cluster_node holds
        ({"APP_VERSION": "v" * 100}, []),
        ({"WIDGET_REFRESH_SECONDS": 0}, ["qcluster.E003"]),
        ({"WIDGET_REFRESH_SECONDS": "15"}, ["qcluster.E003"]),
        ({"WIDGET_REFRESH_SECONDS": 86401}, ["qcluster.E003"]),  # past a browser's setTimeout
        ({"DRAIN_GRACE_SECONDS": -1}, ["qcluster.E004"]),
        ({"LEASE_SAFETY_SECONDS": None}, ["qcluster.E005"]),
        ({"DRAIN_GRACE": 30}, ["qcluster.W001"]),
    ],
)
def test_system_checks_name_a_bad_qcluster_setting(settings, value, ids):
    assert _ids(value, settings) == ids
