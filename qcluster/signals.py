"""Signals a host application can react to. Each is sent after the change has committed.

- ``node_lost(sender, node_id, last_heartbeat)``: the sweeper marked a node LOST (once per loss).
- ``node_draining(sender, node_id)``: this node started draining (sent in ``cluster_runtime``).
"""

from django.dispatch import Signal

node_lost = Signal()
node_draining = Signal()
