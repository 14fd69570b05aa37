"""Views of the example project itself: the Prometheus metrics of both apps."""

from django.http import HttpRequest, HttpResponse
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
REGISTRY.register(qcluster.metrics.ClusterCollector())
REGISTRY.register(qprint.metrics.collectors.DatabaseCollector())
REGISTRY.register(qprint.metrics.collectors.ProcessCollector())
ProcessCollector(registry=REGISTRY)


@never_cache
@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    """``/metrics``: the Prometheus text format (0.0.4), or OpenMetrics when the scraper asks for
    it in ``Accept`` (as Prometheus does)."""
    encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
    return HttpResponse(encoder(REGISTRY), content_type=content_type)
