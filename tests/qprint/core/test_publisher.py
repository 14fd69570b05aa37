"""The publisher's route through a node's event loop: what another thread sends leaves on that
loop, as many at a time as the queue would hold, refusals are counted and told, and a loop that
stops hands the messages back to the publisher's own thread."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import pytest

from qprint.core import publisher
from qprint.core.publisher import GroupPublisher, PublisherCounters
from tests.waiting import wait_until


class RecordingLayer:
    """A layer that records each send and the thread it ran on; ``hold`` keeps sends waiting."""

    def __init__(self, hold: bool = False) -> None:
        self.sent: list[tuple[str, dict, str]] = []
        self.held = hold
        self.release: asyncio.Event | None = None

    async def group_send(self, group: str, message: dict) -> None:
        if self.held:
            self.release = self.release or asyncio.Event()
            await self.release.wait()
        self.sent.append((group, message, threading.current_thread().name))


class RefusingLayer:
    async def group_send(self, group: str, message: dict) -> None:
        raise ConnectionError("redis is down")


class BrokenLayer:
    """A layer whose send cannot even start (its connection settings are wrong)."""

    @property
    def group_send(self):
        raise ValueError("no such host")


@pytest.fixture
def node_loop() -> Iterator[asyncio.AbstractEventLoop]:
    """An event loop running on a thread named ``node-loop`` (a Daphne node's)."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="node-loop", daemon=True)
    thread.start()
    wait_until(loop.is_running, 5, message="the loop runs")
    yield loop
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)
    loop.close()


def test_what_another_thread_sends_leaves_on_the_node_loop(node_loop):
    layer = RecordingLayer()
    thread_layer = RecordingLayer()
    groups = GroupPublisher(10, layer=lambda: thread_layer)
    groups.send_on(node_loop, layer)
    counters = PublisherCounters()
    for n in range(3):
        assert groups.send(f"g{n}", {"n": n}, counters=counters)
    wait_until(lambda: counters.published == 3, 5, message="three sent")
    assert layer.sent == [(f"g{n}", {"n": n}, "node-loop") for n in range(3)]
    assert thread_layer.sent == [] and groups._thread is None  # the thread was not needed
    assert counters.queued == 3 and groups.on_loop == 0


def test_what_the_loop_has_yet_to_send_is_bounded_by_the_queue_size(node_loop):
    layer = RecordingLayer(hold=True)
    groups = GroupPublisher(2, layer=RecordingLayer)
    groups.send_on(node_loop, layer)
    counters = PublisherCounters()
    drops: list[tuple[str, BaseException | None]] = []
    sent = [
        groups.send("g", {"n": n}, counters=counters, on_drop=lambda *d: drops.append(d))
        for n in range(4)
    ]
    assert sent == [True, True, False, False]
    assert drops == [("queue_full", None)] * 2
    assert counters.queued == 2 and counters.dropped_queue_full == 2
    assert groups.flush(0.2) is False  # the two held sends are not out yet
    assert groups.depth() == 2  # what /metrics shows as the wake queue's depth
    wait_until(lambda: layer.release is not None, 5, message="a send waits")
    node_loop.call_soon_threadsafe(layer.release.set)
    assert groups.flush(5) is True
    assert [m for _, m, _ in layer.sent] == [{"n": 0}, {"n": 1}]
    assert counters.published == 2 and groups.on_loop == 0
    assert groups.send("g", {"n": 4}, counters=counters)  # room again
    assert groups.flush(5) is True


@pytest.mark.parametrize(
    ("layer", "error"), [(RefusingLayer(), ConnectionError), (BrokenLayer(), ValueError)]
)
def test_a_send_the_layer_refuses_on_the_loop_is_counted_and_told(node_loop, layer, error):
    groups = GroupPublisher(10)
    groups.send_on(node_loop, layer)
    counters = PublisherCounters()
    drops: list[tuple[str, BaseException | None]] = []
    assert groups.send("g", {}, counters=counters, on_drop=lambda *d: drops.append(d))
    wait_until(lambda: counters.dropped_layer_error == 1, 5, message="the refusal counted")
    assert [(cause, type(exc)) for cause, exc in drops] == [("layer_error", error)]
    assert counters.published == 0 and groups.on_loop == 0


def test_a_send_that_takes_too_long_on_the_loop_is_dropped(node_loop, monkeypatch):
    monkeypatch.setattr(publisher, "SEND_TIMEOUT_SECONDS", 0.05)
    groups = GroupPublisher(10)
    groups.send_on(node_loop, RecordingLayer(hold=True))  # never released
    counters = PublisherCounters()
    drops: list[tuple[str, BaseException | None]] = []
    assert groups.send("g", {}, counters=counters, on_drop=lambda *d: drops.append(d))
    wait_until(lambda: counters.dropped_layer_error == 1, 5, message="the timeout counted")
    assert [(cause, type(error)) for cause, error in drops] == [("layer_error", TimeoutError)]
    assert groups.on_loop == 0 and groups.flush(1) is True


def test_a_loop_that_stopped_hands_the_messages_back_to_the_thread(node_loop):
    loop_layer = RecordingLayer()
    thread_layer = RecordingLayer()
    groups = GroupPublisher(10, layer=lambda: thread_layer)
    groups.send_on(node_loop, loop_layer)
    node_loop.call_soon_threadsafe(node_loop.stop)
    wait_until(lambda: not node_loop.is_running(), 5, message="the loop stopped")
    counters = PublisherCounters()
    assert groups.send("g", {"n": 1}, counters=counters)
    assert groups.flush(5) is True
    assert loop_layer.sent == []
    assert thread_layer.sent == [("g", {"n": 1}, "qprint-publisher")]
    assert counters.published == 1 and groups.on_loop == 0
    assert groups._route is None  # given up: the next message goes to the thread directly


def test_only_the_loop_that_sends_gives_the_route_up(node_loop):
    groups = GroupPublisher(10)
    groups.send_on(node_loop, RecordingLayer())
    other = asyncio.new_event_loop()
    try:
        groups.stop_sending_on(other)
        assert groups._route is not None
        groups.stop_sending_on(node_loop)
        assert groups._route is None
    finally:
        other.close()
