"""Mount with ``path("qcluster/", include("qcluster.urls"))``."""

from django.apps import apps
from django.core.exceptions import ImproperlyConfigured
from django.urls import path

if not apps.is_installed("qcluster"):  # its views' models would fail with a vaguer error
    raise ImproperlyConfigured(
        "The URLs include qcluster.urls but 'qcluster' is not in INSTALLED_APPS: add it (qprint "
        "needs it too, qprint.E006; docs/INSTALL.md)."
    )

from qcluster import views  # after the check above

app_name = "qcluster"
urlpatterns = [
    path("health/", views.health, name="health"),
    path("ready/", views.ready, name="ready"),
]
