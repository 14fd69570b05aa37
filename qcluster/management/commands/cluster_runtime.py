"""``manage.py cluster_runtime``: this node's heartbeat, drain, sweeper and singleton tasks."""

from django.core.management.base import BaseCommand, CommandError

from qcluster import nodes
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
        parser.add_argument(
            "--metrics-port",
            type=int,
            metavar="PORT",
            help="Serve this process's Prometheus figures (prometheus_client's default registry, "
            "where other apps add theirs: the workers' and tasks' counters) on PORT.",
        )
        parser.add_argument(
            "--metrics-bind",
            default="0.0.0.0",
            metavar="ADDRESS",
            help="Address of the metrics port (default: 0.0.0.0).",
        )

    def handle(
        self,
        *args,
        once: bool = False,
        node_id: str | None = None,
        metrics_port: int | None = None,
        metrics_bind: str = "0.0.0.0",
        **options,
    ) -> None:
        if node_id is not None and not node_id.strip():
            raise CommandError("--node-id must not be empty.")
        if metrics_port is not None:
            serve_metrics(metrics_bind, metrics_port)
        identity = read_identity(node_id)
        problems = nodes.identity_problems(identity)
        if problems:
            raise CommandError(
                "This node's identity does not fit its row in cluster_node: "
                + "; ".join(problems)
                + " (the node id comes from --node-id, QQQ_NODE_ID or HOSTNAME; the rest from "
                "the QQQ_* variables and QCLUSTER['APP_VERSION'], docs/CLUSTER.md)."
            )
        runtime = ClusterRuntime(identity, once=once)
        runtime.install_signal_handlers()
        code = runtime.run()
        if code:
            raise CommandError(
                "Stopped without recording it: the database did not answer (see the log).",
                returncode=code,
            )


def serve_metrics(address: str, port: int) -> None:
    """prometheus_client's default registry on ``address:port`` (a daemon thread; OpenMetrics when
    the scraper asks). The web process serves the cluster's figures; this is the runtime's own."""
    from prometheus_client import REGISTRY, start_http_server

    if not 0 < port < 65536:
        raise CommandError(f"--metrics-port must be between 1 and 65535, not {port}.")
    try:
        start_http_server(port, addr=address, registry=REGISTRY)
    except OSError as exc:
        raise CommandError(f"Cannot serve metrics on {address}:{port}: {exc}") from exc
