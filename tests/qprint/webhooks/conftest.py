"""Fixtures of the webhook tests: a receiver on 127.0.0.1, endpoints allowed to reach it, and a
sender running on a thread of the test process (a real one, on the test's PostgreSQL)."""

from __future__ import annotations

import threading

import pytest
from django.test import override_settings

from qprint.models import WebhookDelivery
from qprint.webhooks import endpoints
from qprint.webhooks.sender import Sender
from tests.qprint.webhooks.receiver import Receiver
from tests.waiting import wait_until

LOOPBACK = {"WEBHOOK_ALLOW_HTTP": True, "WEBHOOK_ALLOWED_HOSTS": ["127.0.0.1"]}


def first_attempt(delivery: WebhookDelivery) -> WebhookDelivery:
    """The delivery once the sender recorded its first attempt (whatever its outcome)."""
    return wait_until(
        lambda: (
            WebhookDelivery.objects.filter(pk=delivery.pk, attempts__gte=1)
            .exclude(status="SENDING")
            .first()
        ),
        20,
        message="the attempt recorded",
    )


@pytest.fixture
def loopback_allowed():
    with override_settings(QPRINT=LOOPBACK):
        yield


@pytest.fixture
def receiver():
    r = Receiver().start()
    yield r
    r.stop()


@pytest.fixture
def endpoint(transactional_db, loopback_allowed, receiver):
    """An endpoint of tenant ``acme`` to the receiver, whose secret the receiver knows."""
    endpoint, secret = endpoints.create_endpoint("acme", receiver.url)
    receiver.secrets.append(secret)
    return endpoint


class RunningSender:
    def __init__(self, **kwargs):
        self.stop = threading.Event()
        self.sender = Sender(**kwargs)
        self.thread = threading.Thread(target=self.sender.run, args=(self.stop,), daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.stop.set()
        self.thread.join(30)
        assert not self.thread.is_alive(), "the sender did not stop"


@pytest.fixture
def start_sender(transactional_db, loopback_allowed):
    started: list[RunningSender] = []

    def start(**kwargs) -> RunningSender:
        running = RunningSender(**kwargs)
        started.append(running)
        return running

    yield start
    for running in started:
        running.close()
