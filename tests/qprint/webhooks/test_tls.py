"""An https receiver reached at the checked address: the TLS server name and the certificate
check stay the URL's host name although the connection goes to the pinned IP."""

from __future__ import annotations

import ssl
import tempfile
from pathlib import Path

import pytest
from django.test import override_settings

from qprint.webhooks import destinations, endpoints
from tests.qprint.webhooks.conftest import first_attempt
from tests.qprint.webhooks.receiver import Receiver
from tests.tls import certificate
from tests.waiting import wait_until

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def https_receiver(monkeypatch):
    """``hooks.example`` resolves to 127.0.0.1 (listed), where an https receiver answers with a
    certificate for ``served_name``; the sender trusts that certificate."""
    started: list[Receiver] = []

    def start(served_name: str) -> tuple[Receiver, ssl.SSLContext]:
        directory = Path(tempfile.mkdtemp())
        cert, key = certificate(served_name, directory)
        server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        server.load_cert_chain(cert, key)
        receiver = Receiver(tls=server).start()
        started.append(receiver)
        return receiver, ssl.create_default_context(cafile=str(cert))

    monkeypatch.setattr(destinations, "resolve", lambda host, port: ["127.0.0.1"])
    with override_settings(QPRINT={"WEBHOOK_ALLOWED_HOSTS": ["hooks.example"]}):
        yield start
    for receiver in started:
        receiver.stop()


def test_the_pinned_connection_keeps_the_host_name_for_tls(https_receiver, start_sender):
    receiver, trust = https_receiver("hooks.example")
    endpoint, secret = endpoints.create_endpoint(
        "acme", f"https://hooks.example:{receiver.port}/hooks"
    )
    receiver.secrets.append(secret)
    endpoints.send_test(endpoint)
    start_sender(poll_seconds=0.2, verify=trust)
    wait_until(lambda: receiver.ok(), 20, message="the delivery over https")
    assert receiver.server_names[0] == "hooks.example"
    assert receiver.ok()[0].headers["host"] == f"hooks.example:{receiver.port}"


def test_a_certificate_for_another_name_fails_the_attempt(https_receiver, start_sender):
    receiver, trust = https_receiver("other.example")
    endpoint, _secret = endpoints.create_endpoint(
        "acme", f"https://hooks.example:{receiver.port}/hooks"
    )
    delivery = endpoints.send_test(endpoint)
    start_sender(poll_seconds=0.2, verify=trust)
    row = first_attempt(delivery)
    assert "certificate verify failed" in row.last_error and "'hooks.example'" in row.last_error
    assert receiver.received == []
