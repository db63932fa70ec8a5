"""A view serving the queue gauges to Prometheus, for deployments that scrape the
web tier: mount ``django_pgqueue.urls`` (or this ``metrics`` view) where only your
monitoring can reach it. Needs the ``metrics`` extra (``prometheus-client``).

The numbers are the ones workers serve: the shared snapshot in
``pgqueue_queue_gauge``, recomputed by whichever caller first finds it older
than half of ``PGQUEUE["METRICS_REFRESH_INTERVAL"]`` (one at a time), so scrapes
of many web processes cost a read of a small table each.
"""

from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured
from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_safe

from django_pgqueue import conf
from django_pgqueue.installed import require_installed

require_installed()  # a URLconf mounts this view, the app is missing: say what to add

from django_pgqueue.monitoring.models import QueueGauge  # noqa: E402
from django_pgqueue.queue import pauses  # noqa: E402

try:
    from prometheus_client import CollectorRegistry
    from prometheus_client.exposition import choose_encoder
except ImportError:  # pragma: no cover - the extra is installed wherever the view is tested
    raise ImproperlyConfigured(
        "django_pgqueue.views serves Prometheus metrics and needs prometheus-client: "
        "pip install 'django-pgqueue[metrics]'"
    ) from None

from django_pgqueue.monitoring.gauges import QueueGauges  # noqa: E402


@require_safe  # GET, and HEAD as HTTP requires of every server
def metrics(request: HttpRequest) -> HttpResponse:
    """The queue gauges in Prometheus' text format (or OpenMetrics, if asked for)."""
    settings = conf.get()
    collector = QueueGauges()
    collector.update(
        QueueGauge.objects.refresh(settings.METRICS_REFRESH_INTERVAL / 2),
        pauses.paused(conf.database()),
    )
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
    return HttpResponse(encoder(registry), content_type=content_type)
