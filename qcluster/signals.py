"""Signals a host application can react to. Both are sent after the change has committed, and
both are sent **in a ``cluster_runtime`` process**, never in a web process.

``node_lost(sender=ClusterNode, node_id: str, last_heartbeat: datetime)``
    Sent by the runtime of the node that holds the sweeper lease, once per loss, after the
    transaction that marked ``node_id`` LOST (and raised its alert and released its leases)
    committed. ``last_heartbeat`` is the lost node's last heartbeat (database clock).

``node_draining(sender=ClusterRuntime, node_id: str)``
    Sent by the draining node's own runtime, once per drain, when it enters DRAINING (a drain
    request from the admin or ``cluster_drain``, seen at its next heartbeat, or SIGTERM/SIGINT):
    after the node's row was set to DRAINING and its leases were released (each committed), before
    it waits out the drain. ``node_id`` is the draining node. Receivers run on the runtime's
    database thread: keep them short (the heartbeat waits for them). Use it for work the runtime
    process itself does on a drain.

    A **web process** never receives it (no web code runs in that process). A web process learns
    that its node is draining by reading its node's status, ``qcluster.nodes.node_status(node_id)``
    (``"DRAINING"``), for example every few seconds; qprint's drain watch does exactly that. The
    status is DRAINING from the moment the signal is sent until the node is STOPPED (or the drain
    is cancelled: UP again).
"""

from django.dispatch import Signal

#: The sweeper marked a node LOST. See the module docstring for who sends it, when, and with what.
node_lost = Signal()
#: This node's runtime started draining. See the module docstring: a web process polls
#: ``qcluster.nodes.node_status`` instead.
node_draining = Signal()
