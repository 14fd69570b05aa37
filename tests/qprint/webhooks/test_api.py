"""The webhook endpoints of the application API, the URL rules, and the management command."""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.test import override_settings
from django.urls import reverse

from qprint.models import WebhookDelivery, WebhookEndpoint
from qprint.webhooks import destinations
from tests.qprint.factories import make_key
from tests.qprint.webhooks.conftest import LOOPBACK, first_attempt
from tests.waiting import wait_until

pytestmark = pytest.mark.django_db


def create(client, key, **body):
    return client.post(
        reverse("qprint:webhooks"), body, content_type="application/json", **key.auth
    )


@pytest.fixture
def public_dns(monkeypatch):
    """``hooks.example`` resolves to a public address (no real DNS in tests)."""
    answers = {"hooks.example": ["93.184.216.34"]}
    monkeypatch.setattr(destinations, "resolve", lambda host, port: answers[host])
    return answers


def test_a_webhook_is_made_with_its_secret_shown_once(client, public_dns):
    key = make_key()
    answer = create(client, key, url="https://hooks.example/q", events=["job.printed"])
    assert answer.status_code == 201
    body = answer.json()
    assert set(body) == {
        "id",
        "url",
        "events",
        "description",
        "created_at",
        "previous_secret_expires_at",
        "secret",
    }
    assert body["secret"].startswith("whsec_") and body["events"] == ["job.printed"]
    listed = client.get(reverse("qprint:webhooks"), **key.auth).json()
    assert [w["id"] for w in listed["results"]] == [body["id"]]
    assert "secret" not in listed["results"][0]
    detail = client.get(reverse("qprint:webhook-detail", args=[body["id"]]), **key.auth)
    assert detail.status_code == 200 and "secret" not in detail.json()


@pytest.mark.parametrize(
    ("url", "settings", "problem"),
    [
        ("http://hooks.example/q", {}, "https"),
        ("https://127.0.0.1/q", {}, "public addresses"),
        ("https://10.1.2.3/q", {}, "public addresses"),
        ("https://169.254.169.254/latest", {}, "public addresses"),
        ("https://[::1]/q", {}, "public addresses"),
        ("https://user:pw@hooks.example/q", {}, "user name"),
        ("ftp://hooks.example/q", {}, "https"),
    ],
)
def test_a_url_that_is_not_allowed_is_refused_at_creation(
    client, public_dns, url, settings, problem
):
    key = make_key()
    with override_settings(QPRINT=settings):
        answer = create(client, key, url=url)
    assert answer.status_code == 422
    assert answer.json()["error"] == "invalid" and problem in answer.json()["message"]
    assert not WebhookEndpoint.objects.exists()


def test_a_name_resolving_to_a_private_address_is_refused_unless_listed(client, public_dns):
    key = make_key()
    public_dns["intranet.example"] = ["93.184.216.34", "192.168.1.5"]
    assert create(client, key, url="https://intranet.example/q").status_code == 422
    with override_settings(QPRINT={"WEBHOOK_ALLOWED_HOSTS": ["intranet.example"]}):
        assert create(client, key, url="https://intranet.example/q").status_code == 201
    with override_settings(QPRINT={"WEBHOOK_ALLOWED_HOSTS": ["192.168.0.0/16"]}):
        assert create(client, key, url="https://intranet.example/q").status_code == 201


def test_unknown_event_types_and_fields_are_refused(client, public_dns):
    key = make_key()
    assert create(client, key, url="https://hooks.example/", events=["job.lost"]).status_code == 422
    assert create(client, key, url="https://hooks.example/", colour="red").status_code == 422


def test_another_tenants_webhook_is_404(client, public_dns):
    mine, theirs = make_key("acme"), make_key("globex", name="other")
    made = create(client, mine, url="https://hooks.example/").json()
    for name in ("webhook-detail", "webhook-deliveries", "webhook-test", "webhook-rotate-secret"):
        url = reverse(f"qprint:{name}", args=[made["id"]])
        method = client.post if name in ("webhook-test", "webhook-rotate-secret") else client.get
        answer = method(url, **theirs.auth)
        assert answer.status_code == 404, name
        assert answer.json()["error"] == "not_found"
    delete = client.delete(reverse("qprint:webhook-detail", args=[made["id"]]), **theirs.auth)
    assert delete.status_code == 404
    assert WebhookEndpoint.objects.count() == 1
    gone = client.delete(reverse("qprint:webhook-detail", args=[made["id"]]), **mine.auth)
    assert gone.status_code == 204 and not WebhookEndpoint.objects.exists()


def test_test_deliveries_are_listed_newest_first_and_paginated(client, public_dns):
    key = make_key()
    made = create(client, key, url="https://hooks.example/").json()
    queued = [
        client.post(reverse("qprint:webhook-test", args=[made["id"]]), **key.auth) for _ in range(3)
    ]
    assert all(q.status_code == 202 for q in queued)
    url = reverse("qprint:webhook-deliveries", args=[made["id"]])
    first = client.get(url, {"limit": 2}, **key.auth).json()
    second = client.get(url, {"limit": 2, "cursor": first["next_cursor"]}, **key.auth).json()
    ids = [d["event_id"] for d in first["results"] + second["results"]]
    assert ids == [q.json()["event_id"] for q in reversed(queued)]
    assert second["next_cursor"] is None
    row = first["results"][0]
    assert row["type"] == "webhook.test" and row["status"] == "PENDING" and row["attempts"] == 0
    assert row["next_attempt_at"] is not None


def test_rotating_a_secret_shows_the_new_one_once(client, public_dns):
    key = make_key()
    made = create(client, key, url="https://hooks.example/").json()
    rotated = client.post(reverse("qprint:webhook-rotate-secret", args=[made["id"]]), **key.auth)
    assert rotated.status_code == 200
    assert rotated.json()["secret"].startswith("whsec_")
    assert rotated.json()["secret"] != made["secret"]
    assert rotated.json()["previous_secret_expires_at"] is not None


@pytest.mark.services
@pytest.mark.django_db(transaction=True)
def test_a_stored_url_the_client_cannot_send_to_is_recorded_as_refused(receiver, start_sender):
    """A row whose URL an earlier version accepted and the HTTP client refuses: each attempt is
    recorded (refused, retried, FAILED after its time) instead of failing inside the sender and
    staying SENDING for ever."""
    with override_settings(
        QPRINT={"WEBHOOK_ALLOW_HTTP": True, "WEBHOOK_ALLOWED_HOSTS": ["127.0.0.1"]}
    ):
        from qprint.webhooks import endpoints

        endpoint, _ = endpoints.create_endpoint("acme", receiver.url)
        WebhookEndpoint.objects.filter(pk=endpoint.pk).update(url=receiver.url + "/a\x01b")
        endpoint.refresh_from_db()
        delivery = endpoints.send_test(endpoint)
        running = start_sender(poll_seconds=0.2)
        row = first_attempt(delivery)
        running.close()
    assert "refused" in row.last_error
    assert receiver.started == []


def test_an_address_that_turned_private_is_refused_at_send_time(
    monkeypatch, receiver, start_sender
):
    """DNS rebinding: public when the webhook was made, loopback when it is sent."""
    answers = {"hooks.example": ["93.184.216.34"]}
    monkeypatch.setattr(destinations, "resolve", lambda host, port: answers[host])
    with override_settings(QPRINT={"WEBHOOK_ALLOW_HTTP": True}):
        from qprint.webhooks import endpoints

        endpoint, secret = endpoints.create_endpoint(
            "acme", f"http://hooks.example:{receiver.port}/hooks"
        )
        receiver.secrets.append(secret)
        answers["hooks.example"] = ["127.0.0.1"]
        delivery = endpoints.send_test(endpoint)
        running = start_sender(poll_seconds=0.2)
        row = first_attempt(delivery)
        running.close()
    assert "refused" in row.last_error and "127.0.0.1" not in row.last_error
    assert receiver.started == []

    # Listed, the same name is delivered - to the address that was checked, since the name
    # itself resolves nowhere outside this test: the connection is pinned to it.
    with override_settings(QPRINT={**LOOPBACK, "WEBHOOK_ALLOWED_HOSTS": ["hooks.example"]}):
        from qprint.webhooks import outbox

        outbox.retry([delivery.pk])
        start_sender(poll_seconds=0.2)
        wait_until(lambda: receiver.ok(), 20, message="the delivery, once the name is listed")
    assert receiver.ok()[0].headers["host"] == f"hooks.example:{receiver.port}"


def test_the_management_command_creates_lists_tests_rotates_and_deletes(capsys, public_dns):
    call_command("qprint_webhook", "create", "--tenant", "acme", "--url", "https://hooks.example/")
    out = capsys.readouterr().out.strip().splitlines()
    assert out[-1].startswith("whsec_")
    endpoint = WebhookEndpoint.objects.get()
    assert endpoint.secret == out[-1]
    call_command("qprint_webhook", "list")
    assert str(endpoint.pk) in capsys.readouterr().out
    call_command("qprint_webhook", "test", "--tenant", "acme", "--id", str(endpoint.pk))
    assert WebhookDelivery.objects.filter(endpoint=endpoint, type="webhook.test").count() == 1
    call_command("qprint_webhook", "rotate-secret", "--tenant", "acme", "--id", str(endpoint.pk))
    new = capsys.readouterr().out.strip().splitlines()[-1]
    endpoint.refresh_from_db()
    assert new.startswith("whsec_") and endpoint.secret == new and endpoint.previous_secret
    call_command("qprint_webhook", "delete", "--tenant", "acme", "--id", str(endpoint.pk))
    assert not WebhookEndpoint.objects.exists()
