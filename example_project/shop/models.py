from __future__ import annotations

from django.db import models


class Order(models.Model):
    email = models.EmailField()
    total_cents = models.PositiveIntegerField()
    confirmed_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"order #{self.pk} ({self.email})"
