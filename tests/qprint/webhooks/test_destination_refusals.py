"""Webhook URLs an attacker would try: IPv6 forms that carry an internal IPv4 address, host names
IDNA refuses, text PostgreSQL cannot store; and what a refusal tells the tenant (never what an
internal name resolves to)."""

from __future__ import annotations

import pytest
from django.urls import reverse

from qprint.models import WebhookEndpoint
from qprint.webhooks import destinations
from tests.qprint.factories import make_key

pytestmark = pytest.mark.django_db


def create(client, key, **body):
    return client.post(
        reverse("qprint:webhooks"), body, content_type="application/json", **key.auth
    )


@pytest.fixture
def dns(monkeypatch):
    """A DNS of the test's own: ``hooks.example`` is public, every other name does not exist."""
    answers = {"hooks.example": ["93.184.216.34"]}

    def resolve(host, port):
        host.encode("idna")  # as socket.getaddrinfo does with a str host (UnicodeError)
        if host not in answers:
            raise OSError(f"[Errno -2] Name or service not known: {host}")
        return answers[host]

    monkeypatch.setattr(destinations, "resolve", resolve)
    return answers


def refused(answer) -> str:
    assert answer.status_code == 422, answer.content
    assert answer["Content-Type"] == "application/json"
    assert answer.json()["error"] in ("invalid", "invalid_text")
    assert not WebhookEndpoint.objects.exists()
    return answer.json()["message"]


@pytest.mark.parametrize(
    "address",
    [
        "64:ff9b::a00:5",  # NAT64 of 10.0.0.5
        "2002:a9fe:a9fe::1",  # 6to4 of 169.254.169.254 (cloud metadata)
        "::7f00:1",  # IPv4-compatible 127.0.0.1
        "::ffff:7f00:1",  # IPv4-mapped 127.0.0.1
        "64:ff9b:1::a00:5",  # NAT64, local-use prefix
        "::ffff:0:7f00:1",  # IPv4-translated (SIIT) 127.0.0.1
    ],
)
def test_an_ipv6_address_carrying_an_internal_ipv4_one_is_refused(client, dns, address):
    key = make_key()
    refused(create(client, key, url=f"https://[{address}]/q"))
    dns["sneaky.example"] = [address]
    refused(create(client, key, url="https://sneaky.example/q"))


@pytest.mark.parametrize(
    "address",
    # Reserved ranges Python counts as global (200::/7, 4000::/3, e000::/4, 5f00::/8), and
    # site-local fec0::/10.
    ["200::1", "4000::1", "e000::1", "5f00::1", "fec0::1"],
)
def test_a_reserved_or_site_local_ipv6_address_is_refused(client, dns, address):
    key = make_key()
    refused(create(client, key, url=f"https://[{address}]/q"))
    dns["reserved.example"] = [address]
    refused(create(client, key, url="https://reserved.example/q"))


@pytest.mark.parametrize("address", ["64:ff9b::5db8:d822", "2002:5db8:d822::1", "::5db8:d822"])
def test_an_ipv6_address_carrying_a_public_ipv4_one_is_accepted(client, dns, address):
    assert create(client, make_key(), url=f"https://[{address}]/q").status_code == 201


def test_an_embedded_address_is_allowed_by_the_network_listing_its_ipv4_form(settings, dns):
    settings.QPRINT = {"WEBHOOK_ALLOWED_HOSTS": ["10.0.0.0/8"]}
    assert destinations.check_address("x", "64:ff9b::a00:5") == "64:ff9b::a00:5"


@pytest.mark.parametrize(
    "url",
    [
        "https://" + "a" * 64 + ".example/",  # a label over 63 characters
        "https://a..b/",  # an empty label
        "https://\ud800.example/",  # a lone surrogate in the host
        "https://hooks.example/\ud800",  # a lone surrogate in the path
        "https://hooks.example/\x00",
        # What urlsplit lets through (or drops) and the HTTP client would never send to.
        "https://hooks.example/a\x01b",
        "https://hooks.exa\tmple/x",
        "https://\u2603.hooks.example/",  # IDNA 2003 only
    ],
)
def test_a_url_idna_or_postgresql_refuses_is_a_422(client, dns, url):
    refused(create(client, make_key(), url=url))


def test_a_description_with_a_lone_surrogate_is_a_422(client, dns):
    answer = create(client, make_key(), url="https://hooks.example/", description="a\ud800b")
    refused(answer)
    assert answer.json()["error"] == "invalid_text"


@pytest.mark.parametrize("description", [0, False, [], {}, 7.5])
def test_a_description_that_is_no_text_is_a_422_not_an_empty_one(client, dns, description):
    answer = create(client, make_key(), url="https://hooks.example/", description=description)
    assert "'description'" in refused(answer)


def test_a_refusal_does_not_tell_what_an_internal_name_resolves_to(client, dns):
    key = make_key()
    dns["db.internal.example"] = ["10.20.30.40"]
    dns["metadata.internal.example"] = ["93.184.216.34", "169.254.169.254"]
    messages = {
        name: refused(create(client, key, url=f"https://{name}/q"))
        for name in ("db.internal.example", "metadata.internal.example", "nowhere.example")
    }
    for name, message in messages.items():
        assert "10.20.30.40" not in message and "169.254" not in message
        assert name not in message
    # Resolving to an internal address and not resolving at all read the same: no oracle.
    assert len(set(messages.values())) == 1


def test_logs_name_a_webhook_url_by_its_origin_not_the_secret_it_may_carry(client, dns, caplog):
    """A receiver's URL often carries its own secret (a path like ``/services/T0/B0/secret``, a
    ``?token=``): the node's log names the scheme, host and port only, made or refused."""
    key = make_key()
    dns["db.internal.example"] = ["10.20.30.40"]
    with caplog.at_level("INFO", logger="qprint.webhooks"):
        refused(create(client, key, url="https://db.internal.example/in#t0k3n"))
        made = create(client, key, url="https://hooks.example:8443/services/T0/s3cret?token=t0k3n")
    assert made.status_code == 201, made.content
    lines = [r.getMessage() for r in caplog.records]
    assert any("url=https://hooks.example:8443/…" in line for line in lines), lines
    assert any("url=https://db.internal.example/… reason=" in line for line in lines), lines
    assert not [line for line in lines if "s3cret" in line or "t0k3n" in line]


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://hooks.example", "https://hooks.example"),
        ("https://hooks.example/", "https://hooks.example"),
        ("https://HOOKS.example:443/a", "https://hooks.example:443/…"),
        ("https://hooks.example?k=1", "https://hooks.example/…"),
        ("https://hooks.example:99999/a", "(not a URL)"),
        ("https://[2001:DB8::1]:8443/hook", "https://[2001:db8::1]:8443/…"),
        ("https://[2001:db8::1]", "https://[2001:db8::1]"),
    ],
)
def test_a_url_shown_in_a_log(url, shown):
    assert destinations.shown(url) == shown
