"""HTTP endpoints of qcluster (``qcluster.urls``): health and readiness of this node."""

from django.http import HttpRequest, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from qcluster import health as node_health
from qcluster import identity


@never_cache
@require_GET
def health(request: HttpRequest) -> JsonResponse:
    """200 for UP and DEGRADED, 503 for DOWN."""
    report = node_health.health(identity.node_id())
    return JsonResponse(report, status=503 if report["status"] == node_health.DOWN else 200)


@never_cache
@require_GET
def ready(request: HttpRequest) -> JsonResponse:
    """200 when this node takes traffic; 503 while it is DRAINING or STOPPED."""
    report = node_health.readiness(identity.node_id())
    return JsonResponse(report, status=200 if report["ready"] else 503)
