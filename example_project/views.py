"""Views of the example project itself: the Prometheus metrics of both apps."""

from django.http import HttpRequest, HttpResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

import qcluster.metrics
import qprint.metrics


@never_cache
@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    """``/metrics`` in the Prometheus text format (version 0.0.4)."""
    body = qcluster.metrics.render() + qprint.metrics.render()
    return HttpResponse(body, content_type="text/plain; version=0.0.4; charset=utf-8")
