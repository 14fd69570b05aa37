from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class QClusterConfig(AppConfig):
    name = "qcluster"
    label = "qcluster"
    verbose_name = _("Cluster")
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from qcluster import checks  # noqa: F401  (registers the system checks)
