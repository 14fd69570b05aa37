"""``manage.py cluster_drain``: ask this node to drain (a Kubernetes preStop hook), or cancel."""

import time

from django.core.management.base import BaseCommand, CommandError

from qcluster import identity, nodes
from qcluster.models import NodeStatus


class Command(BaseCommand):
    help = (
        "Ask a node (default: this one) to drain, as the admin's Drain node does; with --wait, "
        "wait until it is STOPPED. For a preStop hook: the node stops taking traffic and hands "
        "its leases over before the pod gets SIGTERM."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("--node-id", help="Node to drain (default: this node's id).")
        parser.add_argument(
            "--wait",
            type=float,
            default=0,
            metavar="SECONDS",
            help="Wait up to this long for the node to be STOPPED (default: do not wait).",
        )
        parser.add_argument("--cancel", action="store_true", help="Cancel the drain instead.")
        parser.add_argument(
            "--by", default="cluster_drain", help="Recorded as who asked (default: cluster_drain)."
        )

    def handle(self, *args, node_id=None, wait=0, cancel=False, by="cluster_drain", **options):
        for option, value in (("--node-id", node_id), ("--by", by)):
            if value is not None and ("\x00" in value or not value.isprintable()):
                # a byte of the command line that is not UTF-8 arrives as a lone surrogate
                raise CommandError(f"{option}: {value!r} is not text a node's row can hold.")
        node_id = node_id or identity.node_id()
        status = nodes.node_status(node_id)
        if status is None:
            raise CommandError(f"Unknown node {node_id!r}: is its cluster_runtime running?")
        if cancel:
            done = nodes.cancel_drain(node_id, by=by)
            self.stdout.write(f"drain_cancel node={node_id} changed={str(done).lower()}")
            return
        done = nodes.request_drain(node_id, by=by)
        self.stdout.write(f"drain_request node={node_id} status={status} new={str(done).lower()}")
        deadline = time.monotonic() + wait
        while wait and time.monotonic() < deadline:
            status = nodes.node_status(node_id)
            if status in (NodeStatus.STOPPED, NodeStatus.LOST, None):
                break
            time.sleep(0.5)
        if wait:
            self.stdout.write(f"drain_wait_over node={node_id} status={status}")
