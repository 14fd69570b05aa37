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
        from qprint.webhooks import sender

        register_tasks()
        sender.register_worker()
        self._install_realtime()

    def _install_realtime(self) -> None:
        """Wakeups leave through the bounded channel-layer publisher; the node's ``connections``
        gauge (written by ``cluster_runtime``) counts the live connection rows naming it."""
        from qcluster import gauges
        from qprint import connection, publisher

        publisher.install()
        gauges.register("connections", connection.live_connections_of_node)
