from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class QPrintConfig(AppConfig):
    name = "qprint"
    label = "qprint"
    verbose_name = _("Printing")
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from qprint.core import (
            checks,  # noqa: F401  (registers the system checks)
            cluster,
        )
        from qprint.metrics import collectors
        from qprint.realtime import bus, publisher, server_log
        from qprint.views import web_server

        # A refused socket upgrade is one log line, not Daphne's traceback.
        server_log.install()
        # Daphne's requests skip Twisted's parsing of form bodies, which Daphne never reads,
        # autobahn's debug line of a connection's options is built only when it is written, and a
        # socket is not read while too many of its frames wait unhandled.
        web_server.install()

        # Wakeups leave through the process's bounded publisher (shared with the notices).
        installed = publisher.install()
        # /metrics reads this process's realtime figures (qprint.metrics imports no transport).
        collectors.install(
            cluster.node_id,
            sockets_open=bus.open_sockets,
            bus_up=bus.bus_up,
            bus_outages=lambda: sum(b.outages for b in bus.all_buses()),
            wake_queue_depth=installed.groups.depth,
            wakeup_counters=lambda: installed.counters,
        )
        if cluster.installed():  # else qprint.E006 names what is missing
            self._register_with_cluster()

    def _register_with_cluster(self) -> None:
        """The singleton tasks (expiry, retention), the webhook sender (a worker on every node),
        and the node's ``connections`` gauge that
        ``cluster_runtime`` writes with each heartbeat (the live connection rows naming it)."""
        from qprint.core import cluster
        from qprint.domain import connection
        from qprint.domain.maintenance import register_tasks
        from qprint.webhooks import sender

        register_tasks()
        sender.register_worker()
        cluster.register_gauge("connections", connection.live_connections_of_node)
