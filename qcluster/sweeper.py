"""The sweep: declaring dead nodes LOST, once, without ever evicting a healthy cluster.

Runs on the one node that holds the ``cluster-sweeper`` lease (``qcluster.leases``). Invariants:

1. **LOST on the database clock.** A node is a candidate when its status is UP or DRAINING and its
   ``heartbeat_at < now() - lost_after_seconds``, both times from the database.
2. **Once per loss.** The transition is one conditional UPDATE (``... WHERE status IN ('UP',
   'DRAINING') AND heartbeat_at < now() - lost``). Only the sweep whose UPDATE matched raises the
   ``cluster.node.lost`` alert, in the same transaction, and releases the leases the node held,
   also in that transaction. The ``node_lost`` signal, the ERROR log line and ``mail_admins`` follow
   after commit. A heartbeat that lands first makes the UPDATE match nothing: no alert.
3. **Idempotent.** A sweeper that crashes mid-sweep leaves each node either fully processed
   (LOST + alert + leases released) or untouched; the next sweeper redoes the rest.
4. **No mass eviction.** A database stall makes every heartbeat late at once. So the sweeper acts
   only once it is *armed* (``SweeperWatch``): it has held the lease and written its own heartbeats
   on time for a full ``lost_after_seconds``; a new sweeper, or a late heartbeat of its own (a stall
   it lived through), restarts the watch. And a sweep that would mark more than half of the live
   nodes LOST (with at least 3 live nodes) marks none and raises a single
   ``cluster.mass_lost_suspected`` alert (one open alert per episode), retrying next cycle.
5. **Retention.** STOPPED and LOST rows whose status is older than ``retain_stopped_days`` are
   deleted.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.core.mail import mail_admins
from django.db import transaction
from django.db.models import DateTimeField, ExpressionWrapper, Value
from django.db.models.functions import Now

from qcluster import alerts, leases, signals
from qcluster.models import LIVE_STATUSES, ClusterNode, NodeStatus
from qcluster.runtime_config import RuntimeConfig

logger = logging.getLogger("qcluster.sweeper")

#: Below this many live nodes the mass-eviction rule does not apply.
MASS_RULE_MIN_NODES = 3


def _now_minus(delta: timedelta):
    return ExpressionWrapper(Now() - Value(delta), output_field=DateTimeField())


@dataclass
class SweepResult:
    lost: list[str] = field(default_factory=list)
    mass_suspected: list[str] = field(default_factory=list)
    deleted: int = 0


class SweeperWatch:
    """When the sweeper may act: after ``lost_after_seconds`` of holding the lease with its own
    heartbeats on time (measured on this process's monotonic clock)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self.since: float | None = None

    def start(self) -> None:
        """The lease was just taken: the watch starts now."""
        self.since = self._clock()

    def stop(self) -> None:
        """The lease was lost or given up."""
        self.since = None

    def heartbeat(self, gap_seconds: float, heartbeat_seconds: int) -> bool:
        """Note one of our own heartbeats; a late one restarts the watch. True if it was late."""
        late = gap_seconds > 2 * heartbeat_seconds
        if late and self.since is not None:
            self.since = self._clock()
        return late

    def armed(self, lost_after_seconds: int) -> bool:
        return self.since is not None and self._clock() - self.since >= lost_after_seconds


def sweep(sweeper_node_id: str, config: RuntimeConfig) -> SweepResult:
    """One sweep by ``sweeper_node_id`` (which must hold the sweeper lease and be armed)."""
    result = SweepResult()
    lost_after = timedelta(seconds=config.lost_after_seconds)
    overdue = ClusterNode.objects.filter(
        status__in=LIVE_STATUSES, heartbeat_at__lt=_now_minus(lost_after)
    ).exclude(node_id=sweeper_node_id)
    candidates = list(overdue.values_list("node_id", flat=True))
    if candidates:
        live = ClusterNode.objects.filter(status__in=LIVE_STATUSES).count()
        if live >= MASS_RULE_MIN_NODES and 2 * len(candidates) > live:
            _suspect_mass_loss(candidates, live)
            result.mass_suspected = candidates
        else:
            for node_id in candidates:
                if _mark_lost(node_id, lost_after, config):
                    result.lost.append(node_id)
    result.deleted = _delete_retired(timedelta(days=config.retain_stopped_days))
    return result


def _mark_lost(node_id: str, lost_after: timedelta, config: RuntimeConfig) -> bool:
    with transaction.atomic():
        changed = ClusterNode.objects.filter(
            node_id=node_id, status__in=LIVE_STATUSES, heartbeat_at__lt=_now_minus(lost_after)
        ).update(status=NodeStatus.LOST, status_changed_at=Now())
        if not changed:
            return False  # it heartbeated, or another sweep got there first
        last_heartbeat = (
            ClusterNode.objects.filter(node_id=node_id).values_list("heartbeat_at", flat=True).get()
        )
        message = (
            f"Node {node_id} missed its heartbeats for more than {config.lost_after_seconds}s "
            f"(last heartbeat {last_heartbeat:%Y-%m-%d %H:%M:%S%z}) and was marked LOST."
        )
        alerts.raise_alert(alerts.NODE_LOST, message, node_id=node_id)
        released = leases.release_all_held_by(node_id)
        transaction.on_commit(
            lambda: _announce_lost(node_id, last_heartbeat, released, message, config)
        )
    return True


def _announce_lost(
    node_id: str, last_heartbeat: datetime, released: list[str], message: str, config
) -> None:
    logger.error(
        "node_lost node=%s last_heartbeat=%s released_leases=%s",
        node_id,
        last_heartbeat.isoformat(),
        ",".join(released) or "-",
    )
    signals.node_lost.send(sender=ClusterNode, node_id=node_id, last_heartbeat=last_heartbeat)
    if config.alert_on_lost:
        try:
            mail_admins(f"Cluster node lost: {node_id}", message)
        except Exception:
            logger.exception("alert_mail_failed node=%s", node_id)


def _suspect_mass_loss(candidates: list[str], live: int) -> None:
    with transaction.atomic():
        if alerts.has_open(alerts.MASS_LOST_SUSPECTED):
            return  # this episode is already reported
        alerts.raise_alert(
            alerts.MASS_LOST_SUSPECTED,
            f"{len(candidates)} of {live} live nodes missed their heartbeats at once "
            f"({', '.join(sorted(candidates))}); none was marked LOST. A database stall or a "
            "network partition is more likely than so many nodes dying together.",
        )
    logger.error(
        "mass_lost_suspected overdue=%d live=%d nodes=%s",
        len(candidates),
        live,
        ",".join(sorted(candidates)),
    )


def _delete_retired(retain: timedelta) -> int:
    deleted, _ = ClusterNode.objects.filter(
        status__in=(NodeStatus.STOPPED, NodeStatus.LOST),
        status_changed_at__lt=_now_minus(retain),
    ).delete()
    if deleted:
        logger.info("nodes_deleted count=%d older_than_days=%d", deleted, retain.days)
    return deleted
