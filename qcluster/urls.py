"""Mount with ``path("qcluster/", include("qcluster.urls"))``."""

from django.urls import path

from qcluster import views

app_name = "qcluster"
urlpatterns = [
    path("health/", views.health, name="health"),
    path("ready/", views.ready, name="ready"),
]
