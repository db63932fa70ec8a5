"""The base of this app's models (imported by the model modules only: defining a
model needs the app registry)."""

from __future__ import annotations

from typing import Any

from django.apps import apps
from django.core.exceptions import ImproperlyConfigured
from django.db import models

from django_pgqueue import conf, wording

# Imported with the app missing (``from django_pgqueue.models import Job`` in a shell):
# Django's "doesn't declare an explicit app_label" named whichever model came first.
if apps.ready and "django_pgqueue" not in apps.app_configs:
    raise ImproperlyConfigured(wording.NOT_INSTALLED)


class OnJobDatabaseModel(models.Model):
    """A model of this app: an instance saved or deleted without ``using`` goes where
    it was read from, else to :func:`conf.database` (where its manager reads), whatever
    the routers say of the model."""

    class Meta:
        abstract = True

    def save(self, *args: Any, **kwargs: Any) -> None:
        if len(args) < 3:  # Django 5.2 still takes using as the third positional argument
            kwargs["using"] = self._where(kwargs.get("using"))
        super().save(*args, **kwargs)

    def delete(
        self, using: str | None = None, keep_parents: bool = False
    ) -> tuple[int, dict[str, int]]:
        return super().delete(using=self._where(using), keep_parents=keep_parents)

    def refresh_from_db(
        self,
        using: str | None = None,
        fields: Any = None,
        from_queryset: Any = None,
    ) -> None:
        if from_queryset is None:
            using = self._where(using)
        super().refresh_from_db(using=using, fields=fields, from_queryset=from_queryset)

    def _where(self, using: str | None) -> str:
        return conf.where(using, self._state.db)
