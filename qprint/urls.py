from django.urls import path  # noqa: F401

app_name = "qprint"
urlpatterns: list = []
