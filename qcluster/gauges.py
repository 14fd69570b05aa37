"""Live numbers other apps report for each node, written with every heartbeat.

    from qcluster import gauges
    gauges.register("connections", count_live_connections)   # func(node_id) -> int

The heartbeat writes ``cluster_node.connections`` from the gauge named ``connections``. A gauge
that is not registered reads 0; a gauge that raises is logged and reads 0, and the heartbeat goes
on (a broken report must never make a healthy node look dead).
"""

import logging
from collections.abc import Callable

logger = logging.getLogger("qcluster.gauges")

_gauges: dict[str, Callable[[str], int]] = {}


def register(name: str, func: Callable[[str], int]) -> None:
    """Register (or replace) the gauge ``name``; ``func(node_id) -> int`` is called by
    ``cluster_runtime`` at each heartbeat, on its database thread.

    Call it from ``AppConfig.ready()``. The gauge ``connections`` fills
    ``cluster_node.connections``. ``func`` runs in the runtime process, not in the web process: it
    reads what it counts from the database (or another shared store), not from web memory.
    """
    if not name:
        raise ValueError("A gauge needs a name.")
    _gauges[name] = func


def unregister(name: str) -> None:
    _gauges.pop(name, None)


def read(name: str, node_id: str) -> int:
    """The gauge's value for ``node_id``; 0 when it is missing or fails."""
    func = _gauges.get(name)
    if func is None:
        return 0
    try:
        return int(func(node_id))
    except Exception:
        logger.exception("gauge_failed name=%s node=%s", name, node_id)
        return 0
