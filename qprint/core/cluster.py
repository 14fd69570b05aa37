"""qprint's doors into qcluster: the only module of qprint that imports it.

qprint runs on every node of a qcluster cluster and uses exactly these parts of it (listed in
docs/CLUSTER.md, "Doors for other apps"):

- the node's identity (:func:`node_id`): recorded as ``claim_node`` and ``connection_node``;
- singleton tasks (:func:`register_task`): job expiry and retention run on one node at a time;
- the node's status (:func:`node_is_draining`): the web process's drain watch closes its
  device sockets when ``cluster_runtime`` marks the node DRAINING;
- the per-node gauges (:func:`register_gauge`): the heartbeat writes ``cluster_node.connections``;
- workers (:func:`register_worker`): the webhook sender runs on every node's ``cluster_runtime``;
- the settings machinery (:class:`AppSettings`, :class:`Setting` and their rules, from
  ``qcluster.appsettings``): ``QPRINT`` is declared on it (:mod:`qprint.core.conf`), like
  ``QCLUSTER``. It needs nothing but Django's settings, so it is imported at once.

``qcluster`` must be in ``INSTALLED_APPS`` (system check ``qprint.E006``); until it is, nothing is
registered and :func:`node_id` still answers from the environment.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import timedelta

from django.apps import apps

from qcluster.appsettings import (  # noqa: F401  (the settings machinery, for qprint.core.conf)
    AppSettings,
    Setting,
    at_least,
    positive_int,
    positive_number,
)


def installed() -> bool:
    return apps.is_installed("qcluster")


def node_id() -> str:
    """This node's id (``QQQ_NODE_ID``, else ``HOSTNAME``, else the host name)."""
    from qcluster import identity

    return identity.node_id()


def register_task(name: str, every: timedelta, func: Callable[[], object]) -> None:
    """Run ``func`` every ``every`` on one node of the cluster at a time (a qcluster lease)."""
    from qcluster import tasks

    tasks.register(name, every, func)


def register_worker(name: str, run: Callable[[threading.Event], object]) -> None:
    """Run ``run(stop)`` on every node while it is UP, until ``stop`` is set (a qcluster worker)."""
    from qcluster import tasks

    tasks.register_worker(name, run)


def register_gauge(name: str, func: Callable[[str], int]) -> None:
    """Report ``func(node_id)`` with every heartbeat of this node (``cluster_node.<name>``)."""
    from qcluster import gauges

    gauges.register(name, func)


def node_is_draining(node: str) -> bool:
    """Whether the cluster has this node DRAINING or STOPPED: it takes no new sockets then.

    Reads the node's row (one query); an unknown node is not draining.
    """
    from qcluster.models import NodeStatus
    from qcluster.nodes import node_status

    return node_status(node) in (NodeStatus.DRAINING, NodeStatus.STOPPED)
