from django.contrib import admin
from django.urls import include, path

from example_project.shop import views

urlpatterns = [
    path("admin/", admin.site.urls),
    path("orders/", views.create_order, name="create-order"),
    path("orders/fail/", views.create_order_then_fail, name="create-order-fail"),
    # The queue gauges for Prometheus (pgqueue/metrics); in production, where only
    # monitoring reaches it.
    path("pgqueue/", include("django_pgqueue.urls")),
]
