"""The shop's background work, written against Django's Tasks API only.

Nothing here imports django-pgqueue: TASKS in settings points the framework at
PgQueueBackend, which is what makes these run in `manage.py runworker`.
"""

from __future__ import annotations

import time

from django.utils import timezone

try:
    from django.tasks import TaskContext, task
except ImportError:  # Django 5.2: the django-tasks backport provides the same API
    from django_tasks import TaskContext, task  # type: ignore[no-redef,import-not-found,unused-ignore]

from example_project.shop.models import Order


class PaymentDeclined(Exception):
    pass


class MailServerBusy(Exception):
    pass


@task(queue_name="emails")
def send_confirmation(order_id: int) -> str:
    """Mark the order confirmed (stands in for sending the email)."""
    Order.objects.filter(pk=order_id).update(confirmed_at=timezone.now())
    return f"confirmation sent for order {order_id}"


@task(queue_name="emails", takes_context=True)
def send_newsletter(context: TaskContext[..., str], issue: int) -> str:
    """Fails on its first two attempts (the mail server is busy), then succeeds."""
    if context.attempt < 3:
        raise MailServerBusy(f"attempt {context.attempt}: 421 try again later")
    return f"newsletter {issue} sent on attempt {context.attempt}"


@task(queue_name="payments")
def charge_card(order_id: int) -> None:
    """Always fails: ends in the admin's dead list, where an operator can retry it."""
    raise PaymentDeclined(f"order {order_id}: card declined by the issuer (code 05)")


@task(queue_name="reports")
def build_report(seconds: float) -> str:
    """Runs longer than the demo's lease: the worker's heartbeat keeps it alive."""
    time.sleep(seconds)
    return f"report built in {seconds:g}s"


@task(queue_name="reports")
def tally_orders() -> str:
    """A periodic job (PGQUEUE["PERIODIC"]["order-tally"] in settings): counts orders."""
    total = Order.objects.count()
    confirmed = Order.objects.filter(confirmed_at__isnull=False).count()
    return f"{confirmed} of {total} orders confirmed"
