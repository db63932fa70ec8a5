"""``path("pgqueue/", include("django_pgqueue.urls"))`` serves ``pgqueue/metrics``."""

from __future__ import annotations

from django.urls import path

from django_pgqueue import views

app_name = "django_pgqueue"
urlpatterns = [path("metrics", views.metrics, name="metrics")]
