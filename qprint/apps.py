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
