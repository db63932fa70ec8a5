from __future__ import annotations

from django.db import models


class Run(models.Model):
    """One row per run of a test task: label, when it started and finished."""

    label = models.CharField(max_length=200, db_index=True)
    started = models.DateTimeField()
    finished = models.DateTimeField()

    class Meta:
        db_table = "testapp_run"

    def __str__(self) -> str:
        return self.label
