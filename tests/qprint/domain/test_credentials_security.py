"""Credentials: stored only as hashes, a disabled device can do nothing, and failed
authentications are throttled per real client address and per credential prefix (429 with
``Retry-After`` for further wrong secrets, never for a right one), counted in the database and
logged without the secret (docs/SECURITY.md)."""

from __future__ import annotations

import base64
import logging
import uuid

import pytest
from django.db import connection
from django.test import override_settings
from django.urls import reverse

from qprint import api
from qprint.domain import credentials
from qprint.models import AuthFailureCount, DevicePrinter, PrintJob, PrintJobEvent
from tests.qprint.factories import connect, make_device, make_key
from tests.waiting import wait_until

pytestmark = pytest.mark.django_db

PDF = b"%PDF-1.4\n%%EOF\n"


def every_stored_text() -> str:
    """Every row of every table of this database, as text."""
    chunks = []
    with connection.cursor() as cursor:
        for table in connection.introspection.table_names():
            quoted = connection.ops.quote_name(table)
            cursor.execute(f"SELECT * FROM {quoted}")
            chunks.extend(repr(row) for row in cursor.fetchall())
    return "\n".join(chunks)


def test_the_database_holds_no_secret_only_its_hash(client):
    device, token = api.create_device("acme", "front-desk")
    _, secret = api.create_application_key("acme", "backend")
    rotated = api.rotate_device_token(device)
    # The secrets were used (authenticated requests, a failed one) before looking.
    assert client.post(reverse("qprint:device-claim"), HTTP_AUTHORIZATION=f"Bearer {rotated}")
    client.get(reverse("qprint:jobs"), HTTP_AUTHORIZATION=f"Bearer {secret}")
    client.get(reverse("qprint:jobs"), HTTP_AUTHORIZATION=f"Bearer {token}")  # the old token
    stored = every_stored_text()
    for value in (token, rotated, secret):
        assert value not in stored
        assert value[:12] not in stored
    assert credentials.hash_secret(rotated) in stored
    assert credentials.hash_secret(secret) in stored


def test_secrets_are_compared_in_constant_time(monkeypatch):
    """The lookup is by hash; the final comparison goes through ``hmac.compare_digest``."""
    calls = []
    real = credentials.hmac.compare_digest
    monkeypatch.setattr(
        credentials.hmac, "compare_digest", lambda a, b: calls.append((a, b)) or real(a, b)
    )
    _, token = api.create_device("acme", "front-desk")
    _, secret = api.create_application_key("acme", "backend")
    assert credentials.device_for_token(token) is not None
    assert credentials.key_for_secret(secret) is not None
    assert [a == b for a, b in calls] == [True, True]


@pytest.fixture
def disabled(client):
    """A device with a job it received and a pending command, then disabled."""
    key = make_key()
    dev = make_device()
    connect(dev.device)
    api.replace_printers(dev.device, [{"name": "laser"}])
    client.post(
        reverse("qprint:jobs"),
        {
            "device": "front-desk",
            "content_type": "application/pdf",
            "content_base64": base64.b64encode(PDF).decode(),
        },
        content_type="application/json",
        **key.auth,
    )
    assignment = client.post(reverse("qprint:device-claim"), **dev.auth).json()
    command = api.send_command(dev.device, "PING")
    api.disable_device(dev.device)
    return dev, assignment, command


def test_a_disabled_device_cannot_claim_download_report_or_change_anything(client, disabled):
    dev, assignment, command = disabled
    job_id = assignment["job_id"]
    event = {
        "event_id": str(uuid.uuid4()),
        "type": "RECEIVED",
        "claim_id": assignment["claim_id"],
        "occurred_at": "2026-01-01T10:00:00Z",
    }
    calls = [
        client.post(reverse("qprint:device-claim"), **dev.auth),
        client.get(reverse("qprint:device-job-document", args=[job_id]), **dev.auth),
        client.post(
            reverse("qprint:device-job-events", args=[job_id]),
            event,
            content_type="application/json",
            **dev.auth,
        ),
        client.post(
            reverse("qprint:device-command-result", args=[command.pk]),
            {"status": "DONE"},
            content_type="application/json",
            **dev.auth,
        ),
        client.put(
            reverse("qprint:device-printers"), [], content_type="application/json", **dev.auth
        ),
    ]
    for answer in calls:
        assert answer.status_code == 403, answer.content
        assert answer.json()["error"] == "disabled"
    assert PrintJob.objects.get(pk=job_id).status == "CLAIMED"
    assert not PrintJobEvent.objects.filter(job_id=job_id, source="DEVICE").exists()
    assert DevicePrinter.objects.filter(device=dev.device).count() == 1
    command.refresh_from_db()
    assert command.status == "PENDING"


# -- the throttle of failed authentications --------------------------------------------------


def claim(client, secret: str, address: str = "10.9.8.7"):
    return client.post(
        reverse("qprint:device-claim"),
        HTTP_AUTHORIZATION=f"Bearer {secret}",
        REMOTE_ADDR=address,
    )


@override_settings(QPRINT={"AUTH_FAILURE_LIMIT": 3})
def test_failures_from_one_address_throttle_its_wrong_tokens_never_a_right_one(client, caplog):
    """A shop behind one NAT address: a stranger there guessing cannot lock the shop's devices
    out; its further guesses are answered 429 with Retry-After."""
    dev = make_device()
    connect(dev.device)
    caplog.set_level(logging.WARNING, logger="qprint.auth")
    wrong = [credentials.new_secret() for _ in range(3)]
    for secret in wrong:
        assert claim(client, secret).status_code == 401
    refused = claim(client, credentials.new_secret())
    assert refused.status_code == 429
    assert refused.json()["error"] == "rate_limited"
    assert 1 <= int(refused["Retry-After"]) <= 60
    # The device behind the same address is not refused for what the stranger did.
    assert claim(client, dev.token).status_code == 204
    # Another address's wrong token is not throttled.
    assert claim(client, credentials.new_secret(), address="10.1.1.1").status_code == 401
    logged = caplog.text
    assert "auth_failed" in logged and "source=10.9.8.7" in logged
    for secret in [*wrong, dev.token]:
        assert secret not in logged and secret[:8] not in logged


@override_settings(QPRINT={"AUTH_FAILURE_LIMIT": 3})
def test_failures_with_one_credential_prefix_throttle_its_guesses_from_any_address(client):
    """A stranger who learned a key's first characters guesses from many addresses: its guesses
    are throttled, the key itself is never refused."""
    key = make_key()
    prefix = key.secret[:8]
    for n in range(3):
        answer = client.get(
            reverse("qprint:jobs"),
            HTTP_AUTHORIZATION=f"Bearer {prefix}wrong{n}",
            REMOTE_ADDR=f"10.0.0.{n + 1}",
        )
        assert answer.status_code == 401
    refused = client.get(
        reverse("qprint:jobs"), HTTP_AUTHORIZATION=f"Bearer {prefix}wrong9", REMOTE_ADDR="10.0.0.99"
    )
    assert refused.status_code == 429 and refused["Retry-After"]
    for address in ("10.0.0.1", "10.0.0.99"):
        assert (
            client.get(
                reverse("qprint:jobs"),
                HTTP_AUTHORIZATION=f"Bearer {key.secret}",
                REMOTE_ADDR=address,
            ).status_code
            == 200
        )
    stored = " ".join(AuthFailureCount.objects.values_list("scope", flat=True))
    assert prefix not in stored


@override_settings(QPRINT={"AUTH_FAILURE_LIMIT": 2, "AUTH_FAILURE_WINDOW_SECONDS": 1})
def test_the_throttle_lets_the_address_in_again_once_the_window_ended(client):
    for _ in range(2):
        claim(client, "wrong-token")
    assert claim(client, "wrong-token").status_code == 429
    wait_until(lambda: claim(client, "wrong-token").status_code == 401, 10, message="window ended")
    from qprint.domain import throttle

    wait_until(lambda: throttle.purge() or not AuthFailureCount.objects.exists(), 10)


# -- the real client address behind trusted proxies -----------------------------------------


def claim_via(client, secret: str, forwarded_for: str, peer: str = "10.0.0.5"):
    """A claim that reached the node through the proxy ``peer``, which appended what it saw."""
    return client.post(
        reverse("qprint:device-claim"),
        HTTP_AUTHORIZATION=f"Bearer {secret}",
        HTTP_X_FORWARDED_FOR=forwarded_for,
        REMOTE_ADDR=peer,
    )


@override_settings(QPRINT={"AUTH_FAILURE_LIMIT": 3, "TRUSTED_PROXIES": ["10.0.0.0/24"]})
def test_a_fresh_forwarded_address_per_guess_is_still_throttled_behind_a_trusted_proxy(client):
    """The client writes the left of X-Forwarded-For; the proxy appends the address it saw."""
    for n in range(3):
        assert claim_via(client, f"guess-{n}", f"198.51.100.{n}, 203.0.113.7").status_code == 401
    assert claim_via(client, "guess-x", "198.51.100.77, 203.0.113.7").status_code == 429
    # Two trusted hops: the rightmost address that is not a proxy is still the guesser.
    assert claim_via(client, "guess-y", "1.2.3.4, 203.0.113.7, 10.0.0.9").status_code == 429
    scopes = set(AuthFailureCount.objects.values_list("scope", flat=True))
    assert "addr:203.0.113.7" in scopes and not any("198.51.100" in s for s in scopes)


@override_settings(QPRINT={"AUTH_FAILURE_LIMIT": 3})
def test_forwarded_for_from_a_peer_that_is_not_a_trusted_proxy_is_ignored(client):
    for n in range(3):
        assert claim_via(client, f"guess-{n}", f"198.51.100.{n}").status_code == 401
    assert claim_via(client, "guess-x", "198.51.100.50").status_code == 429
    assert set(
        AuthFailureCount.objects.filter(scope__startswith="addr:").values_list("scope", flat=True)
    ) == {"addr:10.0.0.5"}


def test_successful_authentications_are_not_counted(client):
    dev = make_device()
    connect(dev.device)
    for _ in range(30):
        assert claim(client, dev.token).status_code == 204
    assert not AuthFailureCount.objects.exists()


def test_a_working_credential_pays_no_statement_for_the_throttle(client):
    """A right secret is never refused by the throttle, so it never asks it."""
    from django.test.utils import CaptureQueriesContext

    dev = make_device()
    connect(dev.device)
    key = make_key()
    for call in (
        lambda: claim(client, dev.token),
        lambda: client.get(reverse("qprint:devices"), **key.auth),
    ):
        with CaptureQueriesContext(connection) as queries:
            assert call().status_code in (200, 204)
        assert not [q["sql"] for q in queries if "qprint_auth_failure" in q["sql"]]


@pytest.mark.parametrize(
    ("header", "secret"),
    [
        ("Bearer abc", "abc"),
        ("  bearer   abc  ", "abc"),
        ("BEARER abc", "abc"),
        ("Basic abc", ""),
        ("Bearer", ""),
        ("Bearer ", ""),
        ("", ""),
        (None, ""),
    ],
)
def test_one_parser_reads_the_bearer_secret_for_http_and_the_socket(header, secret):
    assert credentials.bearer_secret(header) == secret


@pytest.mark.parametrize(
    ("peer", "forwarded_for", "client"),
    [
        ("10.0.0.5", None, "10.0.0.5"),
        ("198.51.100.1", "203.0.113.7", "198.51.100.1"),  # not a proxy of ours: header ignored
        ("10.0.0.5", "203.0.113.7", "203.0.113.7"),
        ("10.0.0.5", "1.1.1.1, 203.0.113.7", "203.0.113.7"),  # the left is the client's text
        ("10.0.0.5", "1.1.1.1, 203.0.113.7, 10.0.0.9", "203.0.113.7"),  # two proxies
        ("10.0.0.5", "garbage, 10.0.0.9", "garbage"),  # text is never a proxy
        ("10.0.0.5", "10.0.0.7, 10.0.0.9", "10.0.0.7"),  # every hop a proxy: the first
        ("2001:db8::5", "2001:db8:1::1", "2001:db8:1::1"),
        ("", None, "unknown"),
    ],
)
def test_the_client_address_is_the_rightmost_that_is_not_a_trusted_proxy(
    peer, forwarded_for, client
):
    from qprint.domain import throttle

    with override_settings(QPRINT={"TRUSTED_PROXIES": ["10.0.0.0/24", "2001:db8::/64"]}):
        assert throttle.client_address(peer, forwarded_for) == client
