"""Reconnect policy of the agent: backoff bounds, URL rotation, what each refusal means."""

import random

import pytest
from websockets.datastructures import Headers
from websockets.exceptions import InvalidStatus
from websockets.http11 import Response

from qprint.agent.connection import (
    Backoff,
    Disposition,
    UrlRotation,
    classify_close,
    classify_handshake_failure,
    reconnect_jitter,
)
from qprint.agent.protocol import Endpoints


def test_backoff_grows_exponentially_within_jitter_bounds_and_caps():
    backoff = Backoff(initial=0.5, maximum=8.0, rng=random.Random(7))
    for attempt in range(12):
        step = min(8.0, 0.5 * 2**attempt)
        for _ in range(1):
            delay = backoff.next_delay()
            assert step / 2 <= delay <= step, (attempt, delay)
    assert backoff.step() == 8.0


def test_backoff_jitter_spreads_devices_apart():
    delays = {
        round(Backoff(1.0, 30.0, rng=random.Random(seed)).next_delay(), 6) for seed in range(50)
    }
    assert len(delays) > 40
    assert all(0.5 <= d <= 1.0 for d in delays)


def test_backoff_resets_after_a_good_connection():
    backoff = Backoff(initial=0.5, maximum=30.0)
    for _ in range(6):
        backoff.next_delay()
    backoff.reset()
    assert backoff.next_delay() <= 0.5


def test_drain_reconnect_jitter_is_short():
    rng = random.Random(1)
    assert all(0 <= reconnect_jitter(rng) <= 0.5 for _ in range(100))


def _refused(status: int) -> InvalidStatus:
    return InvalidStatus(Response(status, "x", Headers()))


@pytest.mark.parametrize("status", [401, 403])
def test_refused_credentials_stop_the_device(status):
    assert classify_handshake_failure(_refused(status)) is Disposition.STOP


@pytest.mark.parametrize("status", [500, 502, 503, 504])
def test_server_errors_at_upgrade_are_retried(status):
    assert classify_handshake_failure(_refused(status)) is Disposition.RETRY


def test_network_errors_are_retried():
    assert classify_handshake_failure(ConnectionRefusedError()) is Disposition.RETRY
    assert classify_handshake_failure(TimeoutError()) is Disposition.RETRY


@pytest.mark.parametrize(
    ("code", "disposition"),
    [
        (4001, Disposition.STOP),
        (4003, Disposition.RECONNECT_NOW),
        (4000, Disposition.RETRY),
        (4400, Disposition.RETRY),
        (4408, Disposition.RETRY),
        (1001, Disposition.RETRY),
        (1012, Disposition.RETRY),
        (None, Disposition.RETRY),
    ],
)
def test_close_codes_decide_stop_retry_or_move_on(code, disposition):
    assert classify_close(code) is disposition


def test_endpoints_derive_socket_and_api_from_the_mount():
    e = Endpoints.from_url("http://lb:8080/qprint")
    assert e.socket == "ws://lb:8080/qprint/ws/device/"
    assert e.claim == "http://lb:8080/qprint/api/v1/device/claim"
    assert Endpoints.from_url("wss://x/qprint/ws/device/").base == "https://x/qprint/"
    assert e.resolve("/qprint/api/v1/device/jobs/1/document") == (
        "http://lb:8080/qprint/api/v1/device/jobs/1/document"
    )


def test_url_rotation_moves_to_the_next_node_and_wraps():
    urls = UrlRotation(["http://a/qprint/", "http://b/qprint/"])
    assert urls.current.base == "http://a/qprint/"
    assert urls.advance().base == "http://b/qprint/"
    assert urls.advance().base == "http://a/qprint/"
