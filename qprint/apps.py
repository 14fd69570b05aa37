from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class QPrintConfig(AppConfig):
    name = "qprint"
    label = "qprint"
    verbose_name = _("Printing")
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from qprint import checks  # noqa: F401  (registers the system checks)
        from qprint.maintenance import register_tasks

        register_tasks()
        self._install_realtime()

    def _install_realtime(self) -> None:
        """Wakeups leave through the bounded channel-layer publisher; the node's ``connections``
        gauge (written by ``cluster_runtime``) counts the live connection rows naming it;
        ``/metrics`` reads this process's realtime figures."""
        from qcluster import gauges, identity
        from qprint import bus, connection, metrics, publisher

        installed = publisher.install()
        gauges.register("connections", connection.live_connections_of_node)
        metrics.install(
            identity.node_id,
            sockets_open=bus.open_sockets,
            bus_up=bus.bus_up,
            bus_outages=lambda: sum(b.outages for b in bus.all_buses()),
            wake_queue_depth=installed.queue.qsize,
            wakeup_counters=lambda: installed.counters,
        )
