"""``manage.py cluster_runtime``: this node's heartbeat, drain, sweeper and singleton tasks."""

from django.core.management.base import BaseCommand, CommandError

from qcluster.identity import read_identity
from qcluster.runtime import ClusterRuntime


class Command(BaseCommand):
    help = (
        "Run this node's cluster runtime: heartbeat, drain on request or SIGTERM, the sweeper "
        "(on one node at a time) and the singleton tasks. One per node, beside the web process, "
        "with the same node id."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument(
            "--once",
            action="store_true",
            help="Run a single heartbeat and sweep cycle, then exit (for cron and tests).",
        )
        parser.add_argument(
            "--node-id",
            help="Node id (default: QQQ_NODE_ID, else HOSTNAME, else the machine's hostname).",
        )

    def handle(self, *args, once: bool = False, node_id: str | None = None, **options) -> None:
        if node_id is not None and not node_id.strip():
            raise CommandError("--node-id must not be empty.")
        runtime = ClusterRuntime(read_identity(node_id), once=once)
        runtime.install_signal_handlers()
        code = runtime.run()
        if code:
            raise CommandError(
                "Stopped without recording it: the database did not answer (see the log).",
                returncode=code,
            )
