"""Views of the example project itself: the Prometheus metrics of both apps.

``/metrics`` is open unless ``METRICS_TOKEN`` is set, then only ``Authorization: Bearer <token>``
gets it (401 otherwise). The figures read from the database are collected at most once per
``METRICS_CACHE_SECONDS`` (a scrape storm cannot load the database); this process's own figures
are read at each scrape.
"""

import hmac

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder
from prometheus_client.process_collector import ProcessCollector

import qcluster.metrics
import qprint.metrics.collectors

#: This process's exposition: the cluster and the print figures read from the database, this
#: process's own instruments, and its resource use (``process_*``).
REGISTRY = CollectorRegistry(auto_describe=False)


def _cache_seconds() -> float:
    return settings.METRICS_CACHE_SECONDS


for collector in (
    qcluster.metrics.ClusterCollector(),
    qprint.metrics.collectors.DatabaseCollector(),
):
    REGISTRY.register(qcluster.metrics.CachedCollector(collector, _cache_seconds))
REGISTRY.register(qprint.metrics.collectors.ProcessCollector())
ProcessCollector(registry=REGISTRY)


def _authorized(request: HttpRequest) -> bool:
    token = settings.METRICS_TOKEN
    if not token:
        return True
    scheme, _, presented = request.headers.get("Authorization", "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(
        presented.strip().encode(), token.encode()
    )


@never_cache
@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    """``/metrics``: the Prometheus text format (0.0.4), or OpenMetrics when the scraper asks for
    it in ``Accept`` (as Prometheus does); 401 without the token when ``METRICS_TOKEN`` is set."""
    if not _authorized(request):
        response = JsonResponse(
            {"error": "unauthorized", "message": "An Authorization: Bearer header is required."},
            status=401,
        )
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
    return HttpResponse(encoder(REGISTRY), content_type=content_type)
