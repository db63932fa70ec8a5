"""Two views: one that commits an order with its job, one that rolls back."""

from __future__ import annotations

from django import forms
from django.db import transaction
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from example_project.shop.models import Order
from example_project.shop.tasks import send_confirmation


class OutOfStock(Exception):
    pass


class OrderForm(forms.ModelForm):  # type: ignore[type-arg]
    class Meta:
        model = Order
        fields = ["email", "total_cents"]


@csrf_exempt
@require_POST
def create_order(request: HttpRequest) -> JsonResponse:
    """The order and its confirmation job commit together, or not at all.

    A missing or malformed field is the client's mistake: 400 with the form's errors,
    no order and no job (not a server error)."""
    form = OrderForm(request.POST)
    if not form.is_valid():
        return JsonResponse({"errors": form.errors}, status=400)
    with transaction.atomic():
        order = form.save()
        result = send_confirmation.enqueue(order.pk)
    return JsonResponse({"order": order.pk, "job": result.id}, status=201)


@csrf_exempt
@require_POST
def create_order_then_fail(request: HttpRequest) -> JsonResponse:
    """Enqueues, then fails inside the same block: the rollback takes the job too."""
    try:
        with transaction.atomic():
            order = Order.objects.create(email=request.POST["email"], total_cents=100)
            send_confirmation.enqueue(order.pk)
            raise OutOfStock("the last item was sold a moment ago")
    except OutOfStock as exc:
        return JsonResponse({"error": str(exc)}, status=409)
