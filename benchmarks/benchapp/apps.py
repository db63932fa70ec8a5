from __future__ import annotations

from django.apps import AppConfig


class BenchAppConfig(AppConfig):
    name = "benchmarks.benchapp"
    label = "benchapp"
    default_auto_field = "django.db.models.BigAutoField"
