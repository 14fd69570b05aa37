"""The webhook admin: endpoints without their secrets, deliveries with their last answer, and the
retry action through the outbox."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission, User
from django.urls import reverse

from qprint.models import DeliveryStatus, WebhookDelivery
from qprint.webhooks import endpoints, outbox_taking

pytestmark = pytest.mark.django_db

DELIVERIES = reverse("admin:qprint_webhookdelivery_changelist")
ENDPOINTS = reverse("admin:qprint_webhookendpoint_changelist")


def staff(client, *codenames: str) -> User:
    user = User.objects.create_user("ops", password="pw", is_staff=True)
    user.user_permissions.set(
        Permission.objects.filter(content_type__app_label="qprint", codename__in=codenames)
    )
    client.force_login(user)
    return user


@pytest.fixture
def failed(loopback_allowed):
    endpoint, secret = endpoints.create_endpoint("acme", "http://127.0.0.1:9/hooks")
    delivery = endpoints.send_test(endpoint)
    (due,) = outbox_taking.take_due(1)
    WebhookDelivery.objects.filter(pk=delivery.pk).update(
        created_at=delivery.created_at - outbox_taking.RETRY_FOR
    )
    outbox_taking.record_attempt(due, outbox_taking.Outcome(status_code=502, answer="bad gateway"))
    return endpoint, secret, WebhookDelivery.objects.get(pk=delivery.pk)


def test_deliveries_show_attempts_and_the_last_answer_and_endpoints_no_secret(client, failed):
    endpoint, secret, delivery = failed
    staff(client, "view_webhookdelivery", "view_webhookendpoint")
    page = client.get(reverse("admin:qprint_webhookdelivery_change", args=[delivery.pk]))
    assert page.status_code == 200
    assert "bad gateway" in page.content.decode() and "502" in page.content.decode()
    listing = client.get(ENDPOINTS).content.decode()
    detail = client.get(reverse("admin:qprint_webhookendpoint_change", args=[endpoint.pk]))
    assert endpoint.url in listing
    assert secret not in listing and secret not in detail.content.decode()


def test_retry_sends_a_failed_delivery_again_for_staff_who_may_change_deliveries(client, failed):
    _endpoint, _secret, delivery = failed
    assert delivery.status == DeliveryStatus.FAILED
    staff(client, "view_webhookdelivery")
    listing = client.get(DELIVERIES).content.decode()
    assert "retry_deliveries" not in listing  # view only: no action

    client.logout()
    User.objects.all().delete()
    staff(client, "view_webhookdelivery", "change_webhookdelivery")
    answer = client.post(
        DELIVERIES, {"action": "retry_deliveries", "_selected_action": [delivery.pk]}, follow=True
    )
    assert [str(m) for m in answer.context["messages"]] == ["1 delivery will be sent again."]
    delivery.refresh_from_db()
    assert delivery.status == DeliveryStatus.PENDING
    assert [d.id for d in outbox_taking.take_due(10)] == [delivery.pk]
