"""The webhook endpoints of the application API: make, list, inspect, delete, test, rotate.

Authenticated with an application key; an endpoint of another tenant is 404. Every change goes
through :mod:`qprint.webhooks.endpoints` (docs/WEBHOOKS.md).
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse

from qprint.models import ApplicationKey, WebhookDelivery, WebhookEndpoint
from qprint.models.serializers import delivery_object, webhook_object
from qprint.views.http import application_endpoint, invalid, json_response, read_json_object
from qprint.views.pagination import paginate
from qprint.webhooks import endpoints

FIELDS = frozenset({"url", "events", "description"})


@application_endpoint("GET", "POST")
def webhooks(request: HttpRequest, key: ApplicationKey) -> HttpResponse:
    if request.method == "POST":
        body = read_json_object(request)
        unknown = sorted(set(body) - FIELDS)
        if unknown:
            raise invalid(unknown[0], "is not a field of a webhook")
        endpoint, secret = endpoints.create_endpoint(
            key.tenant,
            body.get("url"),
            events=body.get("events"),
            description=body.get("description"),  # a description that is no text: 422
        )
        return json_response(webhook_object(endpoint, secret), status=201)
    queryset = WebhookEndpoint.objects.filter(tenant=key.tenant)
    return json_response(
        paginate(request, queryset, ("created_at", "id"), webhook_object, scope=queryset)
    )


@application_endpoint("GET", "DELETE")
def webhook_detail(request: HttpRequest, key: ApplicationKey, webhook_id: str) -> HttpResponse:
    endpoint = endpoints.get_endpoint(key.tenant, webhook_id)
    if request.method == "DELETE":
        endpoints.delete_endpoint(endpoint)
        return HttpResponse(status=204)
    return json_response(webhook_object(endpoint))


@application_endpoint("GET")
def webhook_deliveries(request: HttpRequest, key: ApplicationKey, webhook_id: str) -> HttpResponse:
    """The endpoint's deliveries, newest first, paginated with ``?limit=&cursor=``."""
    endpoint = endpoints.get_endpoint(key.tenant, webhook_id)
    queryset = WebhookDelivery.objects.filter(endpoint=endpoint)
    return json_response(
        paginate(
            request,
            queryset,
            ("created_at", "id"),
            delivery_object,
            scope=queryset,
            key="event_id",
            descending=True,
        )
    )


@application_endpoint("POST")
def webhook_test(request: HttpRequest, key: ApplicationKey, webhook_id: str) -> HttpResponse:
    """202: a ``webhook.test`` delivery is queued (see it in the deliveries)."""
    endpoint = endpoints.get_endpoint(key.tenant, webhook_id)
    return json_response(delivery_object(endpoints.send_test(endpoint)), status=202)


@application_endpoint("POST")
def webhook_rotate_secret(
    request: HttpRequest, key: ApplicationKey, webhook_id: str
) -> HttpResponse:
    """200 the endpoint with its new ``secret`` (shown once); the previous one signs too until
    ``previous_secret_expires_at``."""
    endpoint = endpoints.get_endpoint(key.tenant, webhook_id)
    secret = endpoints.rotate_secret(endpoint)
    return json_response(webhook_object(endpoint, secret))
