"""The bus under a connect burst: a slow publish or a probe late because the process's own loop
is busy is not an outage, the reconcile after a real outage is paced, a socket attached while
the bus is subscribing others is subscribed at once, a new socket waits for its subscription
no longer than the bus can give it, and a subscription does not wait behind a publish."""

from __future__ import annotations

import asyncio
import contextlib
import time

import pytest
import redis
from channels.layers import InMemoryChannelLayer, get_channel_layer

from qprint.realtime import bus as bus_module
from qprint.realtime.bus import DeviceBus
from tests.processes import RedisServer
from tests.qprint.realtime.conftest import close_bus, redis_layers
from tests.waiting import eventually


class SlowLayer:
    """A channel layer whose sends never finish (a loop too busy to get them out)."""

    async def group_send(self, group, message):
        await asyncio.sleep(3600)

    async def send(self, channel, message):
        await asyncio.sleep(3600)


class Socket:
    def __init__(self, device_id: int, *, reads_row_on_wakeup: bool = False):
        self.device_id = device_id
        self.reads_row_on_wakeup = reads_row_on_wakeup
        self.messages: list[tuple[float, dict]] = []

    def deliver(self, message):
        self.messages.append((time.monotonic(), message))


async def test_a_publish_that_times_out_counts_and_leaves_the_bus_up(monkeypatch):
    monkeypatch.setattr(bus_module, "LAYER_TIMEOUT_SECONDS", 0.05)
    device_bus = DeviceBus(asyncio.get_running_loop(), SlowLayer())
    assert not await device_bus.publish(1, {"type": "qprint.replaced", "device_id": 1})
    assert device_bus.up and device_bus.publish_failures == 1


async def test_a_probe_late_because_the_loop_was_busy_is_not_an_outage(monkeypatch):
    monkeypatch.setattr(bus_module, "LAYER_TIMEOUT_SECONDS", 0.1)
    device_bus = DeviceBus(asyncio.get_running_loop(), SlowLayer())
    device_bus.channel = "c"

    async def busy_loop_during_probe():
        await asyncio.sleep(0.01)
        device_bus.max_lag = 0.8  # what the lag tick measures while connects hog the loop

    for _ in range(3):  # however often
        await asyncio.gather(device_bus._run_probe(), busy_loop_during_probe())
    assert device_bus.up and device_bus.excused_timeouts >= 1
    # The same timeouts on a loop that is not late: down at the second probe in a row.
    await device_bus._run_probe()
    assert not device_bus.up


async def test_the_reconcile_after_an_outage_is_paced(monkeypatch):
    monkeypatch.setattr(bus_module, "RECONCILE_PER_SECOND", 100)
    device_bus = DeviceBus(asyncio.get_running_loop(), None)
    sockets = [Socket(i) for i in range(30)]
    for s in sockets:
        device_bus.sockets.setdefault(s.device_id, set()).add(s)
    device_bus.up = False
    started = time.monotonic()
    device_bus._set_up()
    await asyncio.wait_for(device_bus._reconciling, 5)
    times = sorted(t for s in sockets for t, m in s.messages if m["type"] == "qprint.reconcile")
    assert len(times) == 30  # every socket, once
    # 10 a batch, 10 batches a second: the last third goes out at least 0.2 s after the first.
    assert times[-1] - times[0] >= 0.15 and times[0] - started < 0.1


class SlowSubscriptions:
    """A layer whose subscriptions time out until ``fast`` is set (Redis itself answering)."""

    def __init__(self):
        self.fast = False
        self.groups: set[str] = set()

    async def group_add(self, group, channel):
        if not self.fast:
            await asyncio.sleep(3600)
        self.groups.add(group)


async def test_a_subscription_that_times_out_is_tried_again_and_is_not_an_outage(monkeypatch):
    """Thousands of sockets subscribing at once: a group_add that times out (the loop not late)
    leaves the bus up and the device unsubscribed, and the next sync subscribes it (then its
    socket reconciles, for the wakeups it may have missed)."""
    monkeypatch.setattr(bus_module, "LAYER_TIMEOUT_SECONDS", 0.05)
    layer = SlowSubscriptions()
    device_bus = DeviceBus(asyncio.get_running_loop(), layer)
    device_bus.channel = "c"
    monkeypatch.setattr(device_bus, "_start", lambda: None)  # the test runs the passes
    socket = Socket(7)
    device_bus.attach(socket)
    await device_bus._sync_groups()
    assert device_bus.up and device_bus.slow_subscriptions == 1
    assert 7 not in device_bus.subscribed and socket.messages == []
    layer.fast = True
    await device_bus._sync_groups()
    assert device_bus.up and 7 in device_bus.subscribed
    assert layer.groups == {bus_module.device_group(7)}
    assert [m["type"] for _, m in socket.messages] == ["qprint.reconcile"]


class RecordingSubscriptions:
    """A layer that records the subscriptions asked of it, answered at once, except those of
    device ``held``, which wait for ``gate``."""

    def __init__(self):
        self.calls: list[tuple[str, int]] = []
        self.held: int | None = None
        self.gate = asyncio.Event()
        self.inside = asyncio.Event()

    def hold(self, device_id: int) -> None:
        self.held = device_id
        self.gate.clear()
        self.inside.clear()

    async def _answer(self, what: str, group: str) -> None:
        device_id = int(group.rsplit(".", 1)[1])
        if device_id == self.held:
            self.inside.set()
            await self.gate.wait()
        self.calls.append((what, device_id))

    async def group_add(self, group, channel):
        await self._answer("add", group)

    async def group_discard(self, group, channel):
        await self._answer("discard", group)


def recording_bus(monkeypatch, layer: RecordingSubscriptions) -> DeviceBus:
    """A bus whose passes the test runs itself."""
    device_bus = DeviceBus(asyncio.get_running_loop(), layer)
    device_bus.channel = "c"
    monkeypatch.setattr(device_bus, "_start", lambda: None)
    return device_bus


async def test_a_device_is_subscribed_while_it_has_a_socket_here_and_only_then(monkeypatch):
    """A device's group is subscribed once however many sockets it has and passes run, given up
    when its last socket leaves, and subscribed again when one comes back; once the
    subscriptions are forgotten (the bus back after an outage, the group expiry), every device
    with a socket here is subscribed again."""
    layer = RecordingSubscriptions()
    device_bus = recording_bus(monkeypatch, layer)
    first, second, other = Socket(1), Socket(1), Socket(2)
    device_bus.attach(first)
    device_bus.attach(other)
    await device_bus._sync_groups()
    assert layer.calls == [("add", 1), ("add", 2)] and device_bus.subscribed == {1, 2}
    device_bus.attach(second)
    device_bus.detach(first)
    await device_bus._sync_groups()
    assert layer.calls == [("add", 1), ("add", 2)]  # device 1 kept a socket all along
    device_bus.detach(second)
    await device_bus._sync_groups()
    assert layer.calls[2:] == [("discard", 1)] and device_bus.subscribed == {2}
    device_bus.attach(first)
    await device_bus._sync_groups()
    assert layer.calls[3:] == [("add", 1)] and device_bus.subscribed == {1, 2}

    layer.calls.clear()
    device_bus._resubscribe_all()
    await device_bus._sync_groups()
    await device_bus._sync_groups()
    assert layer.calls == [("add", 1), ("add", 2)] and device_bus.subscribed == {1, 2}


async def test_a_device_whose_socket_comes_or_goes_during_a_pass_is_settled_by_the_next(
    monkeypatch,
):
    """The last socket of a device leaving while its subscription is on its way: the next pass
    gives the group up. A socket of a device attaching while its group is being given up: the
    next pass subscribes it again."""
    layer = RecordingSubscriptions()
    device_bus = recording_bus(monkeypatch, layer)

    async def pass_held_at(device_id: int, meanwhile) -> None:
        """A pass whose call for ``device_id`` waits until ``meanwhile()`` has run."""
        layer.hold(device_id)
        held = asyncio.ensure_future(device_bus._sync_groups())
        await asyncio.wait_for(layer.inside.wait(), 5)
        meanwhile()
        layer.gate.set()
        await held

    socket = Socket(1)
    device_bus.attach(socket)
    await pass_held_at(1, lambda: device_bus.detach(socket))  # while subscribing
    await device_bus._sync_groups()
    assert layer.calls == [("add", 1), ("discard", 1)] and device_bus.subscribed == set()

    other = Socket(2)
    device_bus.attach(other)
    await device_bus._sync_groups()
    device_bus.detach(other)
    await pass_held_at(2, lambda: device_bus.attach(other))  # while giving the group up
    await device_bus._sync_groups()
    assert layer.calls[2:] == [("add", 2), ("discard", 2), ("add", 2)]
    assert device_bus.subscribed == {2}


async def test_a_probe_that_times_out_during_a_connect_burst_is_not_an_outage(monkeypatch):
    """Sockets attaching by the hundred while the probe waits: its timeout is the burst's (the
    loop busy without one late turn), not Redis's. Without the burst, two timeouts in a row are an
    outage."""
    monkeypatch.setattr(bus_module, "LAYER_TIMEOUT_SECONDS", 0.1)
    device_bus = DeviceBus(asyncio.get_running_loop(), SlowLayer())
    device_bus.channel = "c"
    monkeypatch.setattr(device_bus, "_start", lambda: None)

    async def burst():
        # All of them while the probe waits, before its timeout can fire: a turn of the loop
        # per socket let a pause of the process (a full collection in a long test run) bring
        # the timeout in before the last of them, and the burst was not the probe's excuse.
        for device_id in range(bus_module.BURST_SOCKETS_EXCUSE):
            device_bus.attach(Socket(device_id))

    for _ in range(3):
        await asyncio.gather(device_bus._run_probe(), burst())
    assert device_bus.up and device_bus.excused_timeouts == 3
    await device_bus._run_probe()
    await device_bus._run_probe()
    assert not device_bus.up


class GatedSubscriptions:
    """A layer whose subscription of device 1 waits for ``gate``; the probe comes straight back."""

    def __init__(self):
        self.gate = asyncio.Event()
        self.inside = asyncio.Event()
        self.bus: DeviceBus | None = None

    async def group_add(self, group, channel):
        if group == bus_module.device_group(1):
            self.inside.set()
            await self.gate.wait()

    async def send(self, channel, message):
        self.bus.dispatch(message)

    async def new_channel(self, prefix):
        return prefix + "c"

    async def receive(self, channel):
        await asyncio.sleep(3600)


@contextlib.asynccontextmanager
async def gated_bus(settings):
    """A bus on :class:`GatedSubscriptions`, its next probe a minute away."""
    settings.QPRINT = {**getattr(settings, "QPRINT", {}), "BUS_PROBE_SECONDS": 60}
    layer = GatedSubscriptions()
    device_bus = DeviceBus(asyncio.get_running_loop(), layer)
    layer.bus = device_bus
    try:
        yield device_bus, layer
    finally:
        layer.gate.set()
        await device_bus.stop()


async def test_a_socket_attached_while_others_subscribe_is_subscribed_without_waiting_for_a_probe(
    settings,
):
    """Devices connecting one after another: the one that attaches while the bus awaits another's
    subscription is subscribed (and reconciled) by the next pass, not at the next probe: until it
    is, a job's wakeup for it is lost and the job waits."""
    async with gated_bus(settings) as (device_bus, layer):
        device_bus.attach(Socket(1))
        await asyncio.wait_for(layer.inside.wait(), 5)  # the pass awaits device 1's group_add
        second = Socket(2)
        device_bus.attach(second)
        layer.gate.set()
        await eventually(lambda: 2 in device_bus.subscribed, 5, message="device 2 subscribed")
        assert [m["type"] for _, m in second.messages] == ["qprint.reconcile"]


async def test_a_new_socket_waits_for_its_subscription_and_no_longer_than_the_bus_can_give_it(
    settings,
):
    """A socket waits for its device's subscription before it handles the device's frames: it
    goes on once the subscription is made (True), at once when the bus is down or when its
    device is subscribed already, and after the bound when the subscription never comes (False:
    its reconcile then reads the row, as without the wait)."""
    async with gated_bus(settings) as (device_bus, layer):
        device_bus.attach(Socket(1))
        waiting = asyncio.ensure_future(device_bus.subscription(1, timeout=5))
        await asyncio.wait_for(layer.inside.wait(), 5)  # the pass awaits device 1's group_add
        assert not waiting.done()
        layer.gate.set()
        assert await asyncio.wait_for(waiting, 5) is True
        assert await device_bus.subscription(1, timeout=0) is True  # subscribed already

        layer.gate.clear()
        device_bus._resubscribe_all()  # subscribing again (a group refresh), held at the gate
        assert await device_bus.subscription(1, timeout=0.2) is False
        assert device_bus._awaiting == {}

        waiting = asyncio.ensure_future(device_bus.subscription(1, timeout=5))
        await asyncio.sleep(0)
        device_bus._set_down("test")
        assert await asyncio.wait_for(waiting, 1) is False  # the outage frees it at once
        assert await device_bus.subscription(1, timeout=5) is False  # down: no wait at all
        assert device_bus._awaiting == {}


async def test_in_a_connect_burst_every_new_socket_waits_for_its_subscription(settings):
    """Fifty devices connecting at once (a dead node's devices arriving) each wait for their own
    subscription, however many wait already, and each goes on once it is made (its ``state`` then
    reads the row after it, as test_consumer.py's
    ``test_a_state_sent_before_the_subscription_is_the_only_read_of_the_row`` shows)."""
    devices = range(1, 51)
    # Device 1's subscription, the first of the pass, is held at the gate.
    async with gated_bus(settings) as (device_bus, layer):
        for device_id in devices:
            device_bus.attach(Socket(device_id))
        waiting = [asyncio.ensure_future(device_bus.subscription(d, timeout=60)) for d in devices]
        await asyncio.wait_for(layer.inside.wait(), 5)
        await asyncio.sleep(0)  # each waiter has run up to its wait
        assert not any(w.done() for w in waiting)
        layer.gate.set()
        assert await asyncio.wait_for(asyncio.gather(*waiting), 5) == [True] * len(devices)
        assert device_bus._awaiting == {}


class PausableRedis:
    """A redis-server of the test's own, whose writes the test pauses (``CLIENT PAUSE WRITE``:
    a ``PUBLISH`` waits, a ``SUBSCRIBE`` does not)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.client = redis.Redis.from_url(url)

    def pause_writes(self) -> None:
        self.client.execute_command("CLIENT", "PAUSE", "10000", "WRITE")

    def take_writes(self) -> None:
        self.client.execute_command("CLIENT", "UNPAUSE")


@contextlib.asynccontextmanager
async def pausable_redis():
    server = await asyncio.to_thread(RedisServer().start)
    paused = PausableRedis(server.url)
    try:
        yield paused
    finally:
        paused.client.close()
        await asyncio.to_thread(server.stop)


async def stop_bus(device_bus: DeviceBus, paused: PausableRedis) -> None:
    """Redis takes writes again, the bus stops and its layers close their connections."""
    paused.take_writes()
    await close_bus(device_bus)


@pytest.mark.services
async def test_a_subscription_does_not_wait_behind_a_publish(settings):
    """The bus publishes a new socket's ``replaced`` on a layer instance of its own: while Redis
    holds a publish (its writes paused), the next device's group is subscribed all the same, and
    the socket waiting for it goes on. On one instance the subscription would wait for the
    publish (channels-redis sends both under one lock per shard): in a connect burst, behind
    every new socket's ``replaced``."""
    from channels_redis.pubsub import RedisPubSubChannelLayer

    settings.QPRINT = {**getattr(settings, "QPRINT", {}), "BUS_PROBE_SECONDS": 60}
    replaced = {"type": "qprint.replaced", "device_id": 1, "connection_id": "c"}
    async with pausable_redis() as paused:
        layer = RedisPubSubChannelLayer(hosts=[{"address": paused.url}])
        publishing = RedisPubSubChannelLayer(hosts=[{"address": paused.url}])
        device_bus = DeviceBus(asyncio.get_running_loop(), layer, publishing)

        def publish_held() -> bool:
            return any(
                c["cmd"] == "publish" and "b" in c["flags"] for c in paused.client.client_list()
            )

        try:
            device_bus.attach(Socket(1))
            assert await device_bus.subscription(1, timeout=5) is True
            assert await device_bus.publish(1, replaced) is True  # its connection is open
            paused.pause_writes()
            sending = asyncio.ensure_future(device_bus.publish(1, replaced))
            await eventually(publish_held, 5, message="the publish held by Redis")
            device_bus.attach(Socket(2))
            assert await device_bus.subscription(2, timeout=5) is True
            assert not sending.done()
            paused.take_writes()
            assert await sending is True
        finally:
            await stop_bus(device_bus, paused)


def test_a_layer_that_reaches_other_processes_is_published_on_through_an_instance_of_its_own(
    settings,
):
    """A node's bus publishes on a second instance of the configured layer (its own connection
    to Redis); the in-memory layer, bound to one process, is its own publisher."""
    settings.CHANNEL_LAYERS = redis_layers("redis://127.0.0.1:6379/0")
    layer = get_channel_layer()
    publishing = bus_module.publishing_layer(layer)
    assert type(publishing) is type(layer) and publishing is not layer
    in_memory = InMemoryChannelLayer()
    assert bus_module.publishing_layer(in_memory) is in_memory
    assert bus_module.publishing_layer(None) is None


def wake(device_id: int, sent_at: float) -> dict:
    return {"type": "qprint.wake", "tenant": "acme", "device_id": device_id, "sent_at": sent_at}


def wakes(socket: Socket) -> list[dict]:
    return [m for _, m in socket.messages if m["type"] == "qprint.wake"]


async def test_the_copy_of_a_wakeup_handed_ahead_is_dropped_and_no_other_message(monkeypatch):
    """A wakeup this process handed to its own socket ahead of the layer: its copy through the
    layer is dropped once; another process's wakeup of the same device is delivered; and the
    wakeups handed ahead are remembered up to ``AHEAD_MAX`` (a copy of a forgotten one is only a
    duplicate: the socket reads its row again)."""
    monkeypatch.setattr(bus_module, "AHEAD_MAX", 3)
    device_bus = DeviceBus(asyncio.get_running_loop(), None)
    socket = Socket(1)
    device_bus.attach(socket)
    copies: list[int] = []
    assert device_bus.deliver_ahead(wake(1, 1.0), lambda: copies.append(1)) is True
    assert device_bus.deliver_ahead(wake(2, 1.0), lambda: copies.append(2)) is False  # none here
    await eventually(lambda: len(wakes(socket)) == 1, 5, message="handed ahead")
    assert copies == [1]  # sent at once: the socket does not read its row on wakeups
    device_bus.from_layer(wake(1, 1.0))  # its copy
    device_bus.from_layer(wake(1, 2.0))  # another process's
    device_bus.from_layer(wake(1, 1.0))  # a second copy: delivered (a duplicate is harmless)
    assert [w["sent_at"] for w in wakes(socket)] == [1.0, 2.0, 1.0]
    assert device_bus.copies_dropped == 1

    for sent_at in (3.0, 4.0, 5.0, 6.0):
        device_bus.deliver_ahead(wake(1, sent_at), lambda: None)
    await eventually(lambda: len(wakes(socket)) == 7, 5, message="four more handed ahead")
    device_bus.from_layer(wake(1, 3.0))  # forgotten: the fourth after it made room
    device_bus.from_layer(wake(1, 6.0))
    assert [w["sent_at"] for w in wakes(socket)][7:] == [3.0]
    assert device_bus.copies_dropped == 2
    device_bus.from_layer({"type": "qprint.replaced", "device_id": 1, "sent_at": 4.0})
    assert socket.messages[-1][1]["type"] == "qprint.replaced"  # not a wakeup handed ahead


async def test_the_copy_of_a_wakeup_for_a_socket_that_reads_its_row_waits_for_that_read(
    monkeypatch,
):
    """A socket that reads its device's row on every wakeup (push mode) is handed the wakeup and
    its copy through the layer waits: never sent when the read found the row held by the
    socket's connection, sent when it did not (taken, failed, not made), when the socket's device
    has no socket left here, when the bus stops, and after ``OWED_COPY_SECONDS`` at the latest;
    once, however many sockets of the device are here."""
    monkeypatch.setattr(bus_module, "OWED_COPY_SECONDS", 0.2)
    device_bus = DeviceBus(asyncio.get_running_loop(), None)
    reader = Socket(1, reads_row_on_wakeup=True)
    device_bus.attach(reader)
    copies: list[float] = []

    async def handed(sent_at: float) -> dict:
        message = wake(1, sent_at)
        once = bus_module._Once(lambda: copies.append(sent_at))
        assert device_bus.deliver_ahead(message, once) is True
        await eventually(lambda: message in wakes(reader), 5, message="handed ahead")
        return message

    held = await handed(1.0)
    device_bus.settle(held, held=True)
    assert device_bus.copies_saved == 1 and device_bus._owed == {}
    device_bus.from_layer(wake(1, 1.0))  # another process's wakeup with the same key: delivered
    assert [w["sent_at"] for w in wakes(reader)] == [1.0, 1.0]

    taken = await handed(2.0)
    assert copies == []
    device_bus.settle(taken, held=False)
    assert copies == [2.0]
    device_bus.settle(taken, held=True)  # a second socket's read, later: nothing more
    assert copies == [2.0] and device_bus.copies_saved == 1

    await handed(3.0)  # never read
    await eventually(lambda: copies == [2.0, 3.0], 5, message="sent once its time is up")

    other = Socket(1)  # a socket of the same device that does not read its row on wakeups
    device_bus.attach(other)
    await handed(4.0)
    assert copies == [2.0, 3.0]  # one socket here reads the row: the copy waits for it
    device_bus.detach(other)
    assert copies == [2.0, 3.0]
    device_bus.detach(reader)  # the device's last socket here
    assert copies == [2.0, 3.0, 4.0] and device_bus._owed == {}

    device_bus.attach(reader)
    await handed(5.0)
    await device_bus.stop()
    assert copies == [2.0, 3.0, 4.0, 5.0] and device_bus._owed == {}


def test_a_copy_handed_to_several_buses_is_sent_once():
    sent: list[int] = []
    once = bus_module._Once(lambda: sent.append(1))
    once()
    once()
    assert sent == [1]


async def test_the_copy_of_a_replaced_published_here_is_dropped():
    """A new connection's ``replaced`` reaches this process's sockets of the device at once; its
    copy through the layer is then dropped, and another connection's ``replaced`` is not."""

    class Layer:
        def __init__(self) -> None:
            self.sent: list[tuple[str, dict]] = []

        async def group_send(self, group: str, message: dict) -> None:
            self.sent.append((group, message))

    layer = Layer()
    device_bus = DeviceBus(asyncio.get_running_loop(), layer)
    socket = Socket(1)
    device_bus.sockets[1] = {socket}  # attached without starting the bus's loops
    ours = {"type": "qprint.replaced", "device_id": 1, "connection_id": "new"}

    assert await device_bus.publish(1, ours) is True
    assert layer.sent == [("qprint.device.1", ours)]
    assert [m for _, m in socket.messages] == [ours]

    device_bus.from_layer(dict(ours))  # its copy
    theirs = {**ours, "connection_id": "newer"}
    device_bus.from_layer(theirs)  # another process's
    assert [m for _, m in socket.messages] == [ours, theirs]
    assert device_bus.copies_dropped == 1


@pytest.mark.services
async def test_a_wakeup_for_a_socket_on_the_publishing_node_skips_the_round_trip_through_redis(
    settings,
):
    """A job accepted on the node that holds its device's socket: the socket is woken at once,
    with Redis's writes paused (the copy through Redis is still sent, for a newer socket of the
    device on another node), and the copy that comes back once Redis takes writes again is
    dropped: one wakeup, one read of the row."""
    from qprint.core.publisher import GroupPublisher
    from qprint.realtime.publisher import ChannelLayerPublisher

    settings.QPRINT = {**getattr(settings, "QPRINT", {}), "BUS_PROBE_SECONDS": 60}
    async with pausable_redis() as paused:
        settings.CHANNEL_LAYERS = redis_layers(paused.url)
        device_bus = bus_module.current()
        publisher = ChannelLayerPublisher(GroupPublisher(16))
        socket = Socket(7)
        try:
            device_bus.attach(socket)
            assert await device_bus.subscription(7, timeout=5) is True
            paused.pause_writes()
            await asyncio.to_thread(publisher.publish, "acme", 7, "job_queued")  # after a commit
            await eventually(lambda: len(wakes(socket)) == 1, 5, message="woken without Redis")
            assert publisher.counters.published == 0  # its copy is held by Redis meanwhile
            paused.take_writes()
            await eventually(lambda: device_bus.copies_dropped == 1, 5, message="copy dropped")
            assert publisher.counters.published == 1
            assert publisher.counters.delivered_locally == 1
            assert len(wakes(socket)) == 1
        finally:
            await stop_bus(device_bus, paused)
            bus_module._buses.pop(asyncio.get_running_loop(), None)


@pytest.mark.services
async def test_a_running_bus_sends_the_wakeups_of_its_process_on_its_own_loop(settings, services):
    """In a node whose bus runs, a wakeup published after a commit (on a database thread) leaves
    on the node's loop, through the bus's publishing layer, not through the publisher's own
    thread: it is not kept waiting while that loop answers the request that committed. It still
    reaches the other nodes; once the bus stops, wakeups go through the thread again."""
    from channels_redis.pubsub import RedisPubSubChannelLayer

    from qprint.core.publisher import process_publisher
    from qprint.realtime.publisher import ChannelLayerPublisher

    settings.QPRINT = {**getattr(settings, "QPRINT", {}), "BUS_PROBE_SECONDS": 60}
    settings.CHANNEL_LAYERS = redis_layers(services.redis_url)
    loop = asyncio.get_running_loop()
    device_bus = bus_module.current()
    sent_here: list[int] = []
    publish_on_layer = device_bus.publishing.group_send

    async def group_send(group, message):
        assert asyncio.get_running_loop() is loop
        sent_here.append(message["device_id"])
        await publish_on_layer(group, message)

    device_bus.publishing.group_send = group_send
    other_node = RedisPubSubChannelLayer(hosts=[{"address": services.redis_url}])
    channel = await other_node.new_channel()
    await other_node.group_add(bus_module.device_group(9), channel)
    publisher = ChannelLayerPublisher(process_publisher())
    try:
        device_bus.attach(Socket(8))  # the bus runs from its first socket
        await asyncio.to_thread(publisher.publish, "acme", 9, "job_queued")
        message = await asyncio.wait_for(other_node.receive(channel), 10)
        assert (message["device_id"], sent_here) == (9, [9])
        await device_bus.stop()
        await asyncio.to_thread(publisher.publish, "acme", 9, "job_queued")
        message = await asyncio.wait_for(other_node.receive(channel), 10)
        assert (message["device_id"], sent_here) == (9, [9])  # through the thread
        await eventually(lambda: publisher.counters.published == 2, 5, message="both counted")
    finally:
        await close_bus(device_bus)
        await other_node.flush()
        bus_module._buses.pop(loop, None)
