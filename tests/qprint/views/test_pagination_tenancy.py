"""Cursors across tenants: a tenant's cursor never reads another tenant's rows, tells nothing of
them, and no list shows a serial number (docs/API.md, "Pagination")."""

from __future__ import annotations

import base64
import json

import pytest
from django.urls import reverse

from qprint.models import Device, WebhookDelivery
from qprint.webhooks import destinations, endpoints
from tests.qprint.factories import make_device, make_key

pytestmark = pytest.mark.django_db


def devices_page(client, key, cursor):
    query = {"limit": 1} if cursor is None else {"limit": 1, "cursor": cursor}
    return client.get(reverse("qprint:devices"), query, **key.auth)


def test_a_cursor_naming_another_tenants_device_reads_nothing_of_it(client):
    mine = make_key("globex", name="globex-key")
    for name in ("a", "b", "z"):
        make_device("globex", name)
    secret = make_device("acme", "m-secret-device").device
    # The cursor such a list once gave out: the row's number. Another tenant's row must not anchor
    # a page (its name would sort the answer: "z" after "m-secret-device").
    for guess in (str(secret.pk), str(secret.pk + 1), "m-secret-device"):
        answer = devices_page(client, mine, guess)
        assert answer.status_code == 422, guess
        assert answer.json()["error"] == "invalid"


def test_another_tenants_cursor_reads_as_a_deleted_row(client):
    acme, globex = make_key("acme"), make_key("globex", name="globex-key")
    for name in ("a", "m", "z"):
        make_device("acme", f"acme-{name}")
        make_device("globex", name)
    acme_cursor = devices_page(client, acme, None).json()["next_cursor"]
    globex_cursor = devices_page(client, globex, None).json()["next_cursor"]
    # globex's own cursor works; acme's, whose row globex cannot see, answers as one of a row
    # deleted since: an empty page, whatever acme's devices are called.
    assert [d["name"] for d in devices_page(client, globex, globex_cursor).json()["results"]] == [
        "m"
    ]
    foreign = devices_page(client, globex, acme_cursor)
    Device.objects.filter(tenant="globex", name="a").delete()
    deleted = devices_page(client, globex, globex_cursor)
    assert foreign.status_code == deleted.status_code == 200
    assert foreign.json() == deleted.json() == {"results": [], "next_cursor": None}


def test_an_edited_cursor_or_one_of_another_list_names_no_row(client, monkeypatch):
    monkeypatch.setattr(destinations, "resolve", lambda host, port: ["93.184.216.34"])
    key = make_key()
    for name in ("a", "b"):
        make_device("acme", name)
    cursor = devices_page(client, key, None).json()["next_cursor"]
    _, _, signature = cursor.rpartition(":")
    empty = {"results": [], "next_cursor": None}
    edited = base64.urlsafe_b64encode(json.dumps("0").encode()).decode().rstrip("=")
    assert devices_page(client, key, f"{edited}:{signature}").json() == empty
    hooks = client.get(reverse("qprint:webhooks"), {"cursor": cursor}, **key.auth)
    assert hooks.status_code == 200 and hooks.json() == empty
    assert devices_page(client, key, cursor).json()["results"][0]["name"] == "b"


def test_deliveries_show_no_serial_number(client, monkeypatch):
    monkeypatch.setattr(destinations, "resolve", lambda host, port: ["93.184.216.34"])
    key = make_key()
    endpoint, _ = endpoints.create_endpoint("acme", "https://hooks.example/")
    for _ in range(3):
        endpoints.send_test(endpoint)
    url = reverse("qprint:webhook-deliveries", args=[endpoint.pk])
    page = client.get(url, {"limit": 2}, **key.auth).json()
    serials = {str(pk) for pk in WebhookDelivery.objects.values_list("pk", flat=True)}
    for delivery in page["results"]:
        assert "id" not in delivery
        assert not {str(v) for v in delivery.values()} & serials
    payload = page["next_cursor"].rpartition(":")[0]
    named = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    assert named == page["results"][-1]["event_id"]  # the event id, not the row's number
    rest = client.get(url, {"limit": 2, "cursor": page["next_cursor"]}, **key.auth).json()
    assert len(rest["results"]) == 1 and rest["next_cursor"] is None
