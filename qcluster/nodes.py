"""The node registry: the only module that writes a node's own row in ``cluster_node``.

(The sweeper's LOST transition and retention delete live in ``qcluster.sweeper``.)

Every write is one conditional UPDATE (or an insert for a node seen for the first time) on the
database clock, so two writers never undo each other silently:

- the runtime's heartbeat writes ``heartbeat_at = now()`` and the live fields, and turns a row the
  sweeper marked LOST while the node was only slow back to UP (one statement, so the sweeper's
  conditional UPDATE either ran before it or does not match after it);
- a drain request or cancel from the admin only touches the drain columns (and, for a cancel, the
  status DRAINING -> UP); the runtime learns of them on its next heartbeat.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from django.db import IntegrityError, transaction
from django.db.models import Case, F, Value, When
from django.db.models.functions import Now

from qcluster.identity import NodeIdentity
from qcluster.models import LIVE_STATUSES, ClusterNode, NodeStatus

logger = logging.getLogger("qcluster.nodes")


@dataclass(frozen=True)
class LiveFields:
    """What a node reports with each heartbeat."""

    pid: int | None = None
    worker_threads: int = 0
    scheduler_enabled: bool = False
    running_tasks: int = 0
    connections: int = 0
    memory_rss_bytes: int | None = None

    def as_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass(frozen=True)
class HeartbeatResult:
    status: str
    drain_requested: bool
    recovered_from_lost: bool = False
    recreated: bool = False


def _identity_fields(node: NodeIdentity) -> dict:
    return {
        "pod_name": node.pod_name,
        "k8s_node_name": node.k8s_node_name,
        "zone": node.zone,
        "deployment": node.deployment,
        "roles": ",".join(node.roles),
        "version": node.version,
    }


def identity_problems(node: NodeIdentity) -> list[str]:
    """What of ``node``'s identity its row in ``cluster_node`` cannot hold (a value longer than its
    column), as sentences; empty when it fits."""
    found = []
    for name, value in {"node_id": node.node_id, **_identity_fields(node)}.items():
        most = ClusterNode._meta.get_field(name).max_length
        if len(value) > most:
            found.append(f"{name} is {len(value)} characters long, at most {most} fit")
    return found


def register_start(node: NodeIdentity, live: LiveFields) -> None:
    """On start: the row is UP, freshly started, with no drain request (insert or update)."""
    fields = {
        **_identity_fields(node),
        **live.as_dict(),
        "status": NodeStatus.UP,
        "started_at": Now(),
        "heartbeat_at": Now(),
        "status_changed_at": Now(),
        "drain_requested": False,
        "drain_requested_by": "",
        "drain_requested_at": None,
    }
    with transaction.atomic():
        if ClusterNode.objects.filter(node_id=node.node_id).update(**fields):
            return
    try:
        with transaction.atomic():
            ClusterNode.objects.create(node_id=node.node_id, **fields)
    except IntegrityError:  # a second process of the same node raced us: same result
        with transaction.atomic():
            ClusterNode.objects.filter(node_id=node.node_id).update(**fields)


def heartbeat(node: NodeIdentity, live: LiveFields) -> HeartbeatResult:
    """Write ``heartbeat_at = now()`` and the live fields; report status and drain request.

    A row marked LOST goes back to UP in the same statement (the node was only slow); a row that
    was deleted meanwhile (retention, or by hand in the admin) is registered again.
    """
    node_id = node.node_id
    with transaction.atomic():
        # The row lock orders us with the sweeper's conditional UPDATE: either it marked the row
        # LOST before (we see it, and log the recovery) or it runs after our fresh heartbeat.
        before = (
            ClusterNode.objects.select_for_update()
            .filter(node_id=node_id)
            .values_list("status", flat=True)
            .first()
        )
        was_lost = before == NodeStatus.LOST
        updated = ClusterNode.objects.filter(node_id=node_id).update(
            heartbeat_at=Now(),
            status=Case(
                When(status=NodeStatus.LOST, then=Value(NodeStatus.UP)),
                default=F("status"),
            ),
            status_changed_at=Case(
                When(status=NodeStatus.LOST, then=Now()), default=F("status_changed_at")
            ),
            **live.as_dict(),
        )
        row = (
            ClusterNode.objects.filter(node_id=node_id)
            .values_list("status", "drain_requested")
            .first()
        )
    if not updated or row is None:
        register_start(node, live)
        return HeartbeatResult(status=NodeStatus.UP, drain_requested=False, recreated=True)
    return HeartbeatResult(status=row[0], drain_requested=row[1], recovered_from_lost=was_lost)


def mark_draining(node_id: str) -> bool:
    """UP (or a LOST row of a node that is in fact alive) -> DRAINING."""
    return _transition(node_id, (NodeStatus.UP, NodeStatus.LOST), NodeStatus.DRAINING)


def mark_up(node_id: str) -> bool:
    """DRAINING -> UP (the drain was cancelled before the node stopped)."""
    return _transition(node_id, (NodeStatus.DRAINING,), NodeStatus.UP)


def mark_stopped(node_id: str) -> bool:
    """Any status -> STOPPED, at the end of a drain. The drain request is done with."""
    with transaction.atomic():
        return bool(
            ClusterNode.objects.filter(node_id=node_id).update(
                status=NodeStatus.STOPPED,
                status_changed_at=Now(),
                drain_requested=False,
                heartbeat_at=Now(),
                running_tasks=0,
                connections=0,
            )
        )


def _transition(node_id: str, from_statuses: tuple[str, ...], to_status: str) -> bool:
    with transaction.atomic():
        return bool(
            ClusterNode.objects.filter(node_id=node_id, status__in=from_statuses).update(
                status=to_status, status_changed_at=Now()
            )
        )


def request_drain(node_id: str, by: str) -> bool:
    """Ask ``node_id`` to drain (the admin's *Drain node*). False if the node is not UP: not
    running, or draining already (asked before, or by a signal: a request there could be
    cancelled, and its cancel would mark UP a node that is going away).

    The node's runtime acts on it at its next heartbeat.
    """
    with transaction.atomic():
        updated = ClusterNode.objects.filter(
            node_id=node_id, status=NodeStatus.UP, drain_requested=False
        ).update(drain_requested=True, drain_requested_by=by[:150], drain_requested_at=Now())
    if updated:
        logger.info("drain_requested node=%s by=%s", node_id, by)
    return bool(updated)


def serving_after_drain(node_ids: list[str]) -> list[str]:
    """The nodes that would still serve if ``node_ids`` drained: UP, no drain asked of them."""
    return list(
        ClusterNode.objects.filter(status=NodeStatus.UP, drain_requested=False)
        .exclude(node_id__in=node_ids)
        .order_by("node_id")
        .values_list("node_id", flat=True)
    )


def cancel_drain(node_id: str, by: str) -> bool:
    """Withdraw a drain request; a node still DRAINING goes back to UP. False if nothing to cancel.

    A node that was already STOPPED stays stopped (it has exited).
    """
    with transaction.atomic():
        updated = (
            ClusterNode.objects.filter(node_id=node_id, status__in=LIVE_STATUSES)
            .filter(drain_requested=True)
            .update(
                drain_requested=False,
                drain_requested_by="",
                drain_requested_at=None,
                status=Value(NodeStatus.UP),
                status_changed_at=Case(
                    When(status=NodeStatus.DRAINING, then=Now()), default=F("status_changed_at")
                ),
            )
        )
    if updated:
        logger.info("drain_cancelled node=%s by=%s", node_id, by)
    return bool(updated)


def node_status(node_id: str) -> str | None:
    """The node's status as the cluster sees it (a ``NodeStatus`` value), None if unknown.

    One indexed read. This is how a web process learns that its node is draining
    (``"DRAINING"``): the ``node_draining`` signal is sent in the ``cluster_runtime`` process only.
    Compare the result with ``NodeStatus`` members (they are strings).
    """
    return ClusterNode.objects.filter(node_id=node_id).values_list("status", flat=True).first()
