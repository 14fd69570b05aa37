"""URLs of the example project: the admin, the two apps and the metrics endpoint."""

from django.contrib import admin
from django.urls import include, path

from example_project import views

urlpatterns = [
    path("admin/", admin.site.urls),
    path("qprint/", include("qprint.urls")),
    path("qcluster/", include("qcluster.urls")),
    path("metrics", views.metrics, name="metrics"),
]
