"""Webhook delivery: latency from the commit to the receiver, and deliveries per second
(not collected by default).

    DATABASE_URL=postgres://... REDIS_URL=redis://... \
        BENCH_DELIVERIES=1000 .venv/bin/python -m pytest tests/bench/bench_webhooks.py -s -q

One sender (``qprint.webhooks.sender.Sender``, as ``cluster_runtime`` runs it) on a thread of
this process, a receiver on 127.0.0.1 verifying every signature with ``standardwebhooks``.
Latency: one ``webhook.test`` delivery committed at a time, measured until the receiver has it
(the sender woken by the after-commit notice). Throughput: ``BENCH_DELIVERIES`` rows committed
first, then the time until every one is DELIVERED.
"""

from __future__ import annotations

import logging
import os
import statistics
import time

import pytest

from qprint.models import DeliveryStatus, WebhookDelivery
from qprint.webhooks import outbox
from tests.qprint.webhooks.conftest import (  # noqa: F401  (fixtures)
    endpoint,
    loopback_allowed,
    receiver,
    start_sender,
)
from tests.waiting import wait_until

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]

ROUNDS = int(os.environ.get("BENCH_ROUNDS", "50"))
DELIVERIES = int(os.environ.get("BENCH_DELIVERIES", "1000"))
IN_FLIGHT = int(os.environ.get("BENCH_IN_FLIGHT", "16"))


@pytest.fixture(autouse=True)
def quiet_logs():
    logging.disable(logging.INFO)
    yield
    logging.disable(logging.NOTSET)


def test_bench_webhook_latency_and_throughput(endpoint, receiver, start_sender):  # noqa: F811
    start_sender(max_in_flight=IN_FLIGHT)
    latencies = []
    for i in range(ROUNDS):
        committed = time.monotonic()
        outbox.announce_test(endpoint)
        wait_until(lambda i=i: len(receiver.received) > i, 10, interval=0.001)
        latencies.append(receiver.received[i].at - committed)
    latencies.sort()
    print(
        f"\nlatency commit -> received over {ROUNDS}: "
        f"p50 {statistics.median(latencies) * 1000:.1f} ms, "
        f"p99 {latencies[int(len(latencies) * 0.99) - 1] * 1000:.1f} ms, "
        f"max {latencies[-1] * 1000:.1f} ms"
    )
    assert all(r.verified for r in receiver.received)


def test_bench_webhook_deliveries_per_second(endpoint, receiver, start_sender):  # noqa: F811
    for _ in range(DELIVERIES):
        outbox.announce_test(endpoint)
    started = time.monotonic()
    start_sender(max_in_flight=IN_FLIGHT, poll_seconds=0.2)
    wait_until(
        lambda: (
            WebhookDelivery.objects.filter(status=DeliveryStatus.DELIVERED).count() == DELIVERIES
        ),
        600,
        interval=0.05,
    )
    elapsed = time.monotonic() - started
    print(
        f"\n{DELIVERIES} deliveries in {elapsed:.2f} s: {DELIVERIES / elapsed:.0f}/s "
        f"({IN_FLIGHT} in flight, one sender)"
    )
    assert len(receiver.ids()) == DELIVERIES


def test_bench_wait_latency():
    """``GET ...?wait=30`` in-process: from the PRINTED commit to the answer."""
    import threading

    from django.test import Client
    from django.urls import reverse

    from qprint.webhooks import notify
    from tests.qprint.factories import make_key
    from tests.qprint.webhooks.test_wait import report, spooled_job

    key = make_key()
    latencies = []
    for _ in range(min(ROUNDS, 20)):
        device, job, claim = spooled_job()
        answered: list[float] = []

        def wait(job=job, answered=answered):
            Client().get(reverse("qprint:job-detail", args=[job.pk]), {"wait": "30"}, **key.auth)
            answered.append(time.monotonic())

        waiter = threading.Thread(target=wait)
        waiter.start()
        wait_until(lambda job=job: notify.job_key(job.pk) in notify._callbacks, 10, interval=0.001)
        report(device, job, "PRINTED", claim.claim_id)
        committed = time.monotonic()
        waiter.join(35)
        latencies.append(answered[0] - committed)
        device.delete()
    latencies.sort()
    print(
        f"\n?wait: PRINTED commit -> answer over {len(latencies)}: "
        f"p50 {statistics.median(latencies) * 1000:.1f} ms, max {latencies[-1] * 1000:.1f} ms"
    )
