"""Fixtures of the qcluster tests: cluster settings for fast runtimes, overdue heartbeats."""

from datetime import timedelta

import pytest
from django.db.models import DateTimeField, ExpressionWrapper, Value
from django.db.models.functions import Now

from qcluster.models import ClusterLease, ClusterNode, ClusterSetting


def db_now_minus(seconds: float):
    """``now() - seconds`` on the database clock, for rows that must look old."""
    return ExpressionWrapper(
        Now() - Value(timedelta(seconds=seconds)), output_field=DateTimeField()
    )


def make_node(node_id: str, status: str = "UP", age_seconds: float = 0, **fields) -> ClusterNode:
    """A node row whose heartbeat (and status change) is ``age_seconds`` old, database clock."""
    fields.setdefault("roles", "web")
    node = ClusterNode.objects.create(node_id=node_id, status=status, **fields)
    ClusterNode.objects.filter(node_id=node_id).update(
        heartbeat_at=db_now_minus(age_seconds), status_changed_at=db_now_minus(age_seconds)
    )
    node.refresh_from_db()
    return node


def expire_lease(name: str, seconds_ago: float = 1) -> None:
    ClusterLease.objects.filter(name=name).update(expires_at=db_now_minus(seconds_ago))


def set_cluster_settings(**values) -> None:
    """Write runtime settings in an order the validation accepts."""
    if "heartbeat_seconds" in values and "lost_after_seconds" in values:
        ClusterSetting(key="lost_after_seconds", value="100000").save()
    for key, value in values.items():
        ClusterSetting(key=key, value=str(value).lower()).save()


@pytest.fixture
def fast_cluster_settings(transactional_db):
    """heartbeat 1 s, lost after 3 s: the runtimes under test decide within seconds."""
    set_cluster_settings(heartbeat_seconds=1, lost_after_seconds=3, alert_on_lost=True)
