"""This process's device sockets and their one subscription to the channel layer.

Every Daphne process keeps one :class:`DeviceBus` per event loop. It holds

- the registry of the sockets open here (device id -> sockets), which the drain, the metrics and
  the reconcile walk;
- ONE channel-layer channel for the whole process, added to the group ``qprint.device.<pk>`` of
  each device that has a socket here. A message on a group reaches the process once and is
  handed to the device's sockets through their own queue (no per-socket Redis subscription). A
  new socket handles its device's frames once that subscription is made
  (:meth:`DeviceBus.subscription`: bounded), so that its ``state`` reads the row after it;
- a second instance of the configured layer that the bus publishes on (the ``replaced`` of a new
  connection): channels-redis's pub/sub layer sends a publish and a subscription on one lock per
  Redis shard, and a publish holds it for a round trip; on their own instance, a connect burst's
  ``replaced`` messages do not hold back its subscriptions (:func:`publishing_layer`). A
  ``replaced`` reaches this process's sockets at once, and its copy through the layer is dropped
  when it comes back, as a wakeup's is (below). While the bus runs, the wakeups and notices that
  the process's database threads publish leave on this loop through that instance too
  (:meth:`qprint.core.publisher.GroupPublisher.send_on`), not on the publisher's own thread;
- the wakeups this process publishes for a device with a socket here, handed to that socket at
  once (:func:`deliver_ahead`). Their copy through the layer is for a newer socket of the device
  on another node; when it comes back here it is dropped (:meth:`DeviceBus.from_layer`), so the
  socket handles each wakeup once. A socket that reads its row on every wakeup (push mode) learns
  in that read whether its connection still holds the row; while one is here the copy is owed,
  not sent: sent when the read finds the row taken, fails or never comes (the socket closed,
  :data:`OWED_COPY_SECONDS` passed), and never when it finds the row held
  (:meth:`DeviceBus.settle`: a socket that takes the row later reads it after taking it);
- a probe that publishes to its own channel every ``BUS_PROBE_SECONDS`` and waits to receive it:
  the end-to-end outage detector. ``RedisPubSubChannelLayer`` reconnects and resubscribes by
  itself but calls no ``on_reconnect`` hook, so the bus learns that Redis came back from its
  probe, and then asks every socket of the process to reconcile (read its row), paced at
  :data:`RECONCILE_PER_SECOND`. A probe that times out while the process's own event loop runs
  late, or while this process accepted :data:`BURST_SOCKETS_EXCUSE` sockets or more (a
  connect burst), is tried again rather than taken for an outage, and a failed
  ``publish`` (the ``replaced`` of a new connection) is counted, never an outage. Nor is a
  ``group_add`` or ``group_discard`` that only timed out (``bus_slow``: thousands of sockets
  subscribing at once keep the layer's one connection busy): it is tried again at the next
  sync, and the device's heartbeats cover it meanwhile; only the probe says Redis is gone.

Nothing here closes a socket: while the layer fails, the bus logs one ``bus_down`` line, retries,
and the sockets carry on with their heartbeats (which find what a lost wakeup would have said).
Group membership is re-added periodically when the layer expires it (``group_expiry`` of the
core layer), so a connection older than the expiry is still woken.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from channels.layers import (
    DEFAULT_CHANNEL_LAYER,
    InMemoryChannelLayer,
    channel_layers,
    get_channel_layer,
)

from qprint.core.conf import qprint_settings
from qprint.core.publisher import cross_process_layer, process_publisher

logger = logging.getLogger("qprint.bus")

#: How long one layer operation may take before the bus counts it as failed.
LAYER_TIMEOUT_SECONDS = 2.0
#: A layer operation that timed out while this process's event loop ran this late (a callback
#: due now ran that much later) is the loop's fault, not the bus's: a connect burst keeps the loop
#: busy, and a round trip through Redis takes several turns of the loop. It is tried again; the
#: bus stays up.
LOOP_LAG_EXCUSE_SECONDS = 0.1
#: Probes in a row that must time out (on a loop that was not late) before the bus is down.
PROBE_TIMEOUTS_FOR_OUTAGE = 2
#: Sockets attached here while one probe ran that make its timeout the connect burst's, not the
#: bus's: thousands of handshakes and subscriptions keep this process busy without the loop
#: running measurably late at any one turn, and a probe's round trip then waits behind them.
BURST_SOCKETS_EXCUSE = 50
#: After an outage, the sockets reconcile (read their rows) this many per second, not all at once.
RECONCILE_PER_SECOND = 1000
#: The longest a new socket waits for its device's subscription (:meth:`DeviceBus.subscription`)
#: before it handles the device's frames anyway.
SUBSCRIPTION_WAIT_SECONDS = 1.0
#: How long a wakeup handed ahead to this process's sockets (:func:`deliver_ahead`) waits for its
#: copy through the layer to be dropped, and how many wait at most: a copy that never comes (Redis
#: down) is forgotten, and a copy that comes later still is handled again (a duplicate wakeup is
#: harmless: the socket reads its row again, or wakes its device again, whose claim then finds
#: what there is).
AHEAD_SECONDS = 10.0
AHEAD_MAX = 10_000
#: The longest the copy of a wakeup handed ahead to a socket that reads its row on wakeups waits
#: for that read (:meth:`DeviceBus.settle`) before it is sent anyway.
OWED_COPY_SECONDS = 1.0


#: What a wakeup (``qprint.wake``) may say of its device's queue: true, a job was queued by the
#: commit that published it (:data:`qprint.domain.wakeups.JOB_QUEUED`); false, a job left CLAIMED
#: and no other job of the device waited to be claimed
#: (:data:`qprint.domain.wakeups.JOB_RELEASED_NOTHING_QUEUED`). Absent: it does not say.
QUEUED = "queued"


def device_group(device_id: int) -> str:
    """The channel-layer group of a device (docs/REALTIME.md)."""
    return f"qprint.device.{device_id}"


def _ahead_key(message: dict[str, Any]) -> tuple[Any, ...] | None:
    """What tells a message handed to this process's sockets ahead of the layer from its copy
    through the layer: a wakeup by its device and ``sent_at``, a ``replaced`` by its device and
    the new connection's id; None for any other message (never handed ahead)."""
    kind = message.get("type")
    if kind == "qprint.wake":
        return kind, message.get("device_id"), message.get("sent_at")
    if kind == "qprint.replaced":
        return kind, message.get("device_id"), message.get("connection_id")
    return None


class Socket(Protocol):
    device_id: int
    #: Every wakeup makes it read its device's row in the claim's lock, then call
    #: :meth:`DeviceBus.settle` (push mode).
    reads_row_on_wakeup: bool

    def deliver(self, message: dict[str, Any]) -> None:
        """Queue ``message`` for the socket (never blocks)."""


def publishing_layer(layer: Any) -> Any:
    """The layer a bus publishes on: for a layer that reaches other processes, a second instance
    of the configured one (``CHANNEL_LAYERS["default"]``: one more connection to Redis per
    process); else ``layer`` itself.

    channels-redis's pub/sub layer sends a publish and a subscription under one lock per shard,
    and a publish holds the lock until Redis answers. On one instance, every new socket's
    ``replaced`` message would hold back the subscriptions of the sockets after it: 5,000 devices
    connecting to one node, each waiting for its subscription, connected at 326 to 420 a second
    instead of 458 to 479 (docs/PERFORMANCE.md, "The eighteenth step" and "The nineteenth
    step")."""
    if layer is None or isinstance(layer, InMemoryChannelLayer):
        return layer
    return channel_layers.make_backend(DEFAULT_CHANNEL_LAYER)


class DeviceBus:
    def __init__(self, loop: asyncio.AbstractEventLoop, layer: Any, publishing: Any = None) -> None:
        self.loop = loop
        #: The layer the bus subscribes, receives and probes on...
        self.layer = layer
        #: ...and the one it publishes on (:func:`publishing_layer`; ``layer`` when not given).
        self.publishing = publishing if publishing is not None else layer
        self.sockets: dict[int, set[Socket]] = {}
        self.channel: str | None = None
        self.subscribed: set[int] = set()
        #: Devices whose group may have to be subscribed or given up by the next pass: a socket
        #: attached for a device not subscribed, a device's last socket detached, or every
        #: device after the subscriptions were forgotten (:meth:`_resubscribe_all`). A pass
        #: (:meth:`_sync_groups`) looks at these alone: a connect burst's passes each walked every
        #: socket of the process before.
        self._unsettled: set[int] = set()
        # Devices whose sockets here have been reconciled after their first subscription.
        self.reconciled: set[int] = set()
        self.up = True
        self.outages = 0
        self._changed = asyncio.Event()
        self._probe: tuple[str, asyncio.Future] | None = None
        self._tasks: list[asyncio.Task] = []
        self._stopping = False
        self._groups_refreshed_at = time.monotonic()
        #: The most the loop ran late since the last probe began (measured by a 0.25 s tick).
        self.max_lag = 0.0
        self.publish_failures = 0
        self.excused_timeouts = 0
        self.slow_subscriptions = 0
        #: Sockets attached since the process started (a probe compares it before and after).
        self.attached = 0
        self._probe_timeouts = 0
        self._reconciling: asyncio.Task | None = None
        #: Sockets waiting for their device's subscription (:meth:`subscription`), by device.
        self._awaiting: dict[int, list[asyncio.Future]] = {}
        #: Messages handed ahead (:meth:`deliver_ahead`, :meth:`publish`) by :func:`_ahead_key`,
        #: with when; written from the publishing threads and the loop, read on the loop.
        self._ahead: OrderedDict[tuple[Any, ...], float] = OrderedDict()
        self._ahead_lock = threading.Lock()
        #: Copies through the layer of messages handed ahead, dropped.
        self.copies_dropped = 0
        #: Wakeups handed ahead whose copy waits for a socket's read (:meth:`settle`), by
        #: :func:`_ahead_key`: the copy's send and the timer that sends it anyway (the loop's).
        self._owed: dict[tuple[Any, ...], tuple[Callable[[], None], asyncio.TimerHandle]] = {}
        #: Copies never sent: a socket here read its row and still held it.
        self.copies_saved = 0

    # -- registry ---------------------------------------------------------------------------

    def attach(self, socket: Socket) -> None:
        self.attached += 1
        self.sockets.setdefault(socket.device_id, set()).add(socket)
        if socket.device_id not in self.subscribed:
            self._unsettled.add(socket.device_id)
        self._start()
        self._changed.set()

    async def subscription(
        self, device_id: int, timeout: float = SUBSCRIPTION_WAIT_SECONDS
    ) -> bool:
        """Wait until the device's group is subscribed here: True once it is; False at once when
        no subscription is coming (no layer, the bus down or not running), and False when
        ``timeout`` passed first.

        A new socket waits for it before it reads the device's row (its ``state``): every wakeup
        published before the subscription is then in that read, and the reconcile that the
        subscription asks for (:meth:`_sync_groups`) finds the row read since and reads nothing.
        Without the wait, a device whose ``state`` came before the subscription had its row read
        twice."""
        if device_id in self.subscribed:
            return True
        if self.layer is None or not self.up or not self._tasks:
            return False  # no subscription is coming (no layer, or the bus is not running)
        waiter = self.loop.create_future()
        self._awaiting.setdefault(device_id, []).append(waiter)
        try:
            return await asyncio.wait_for(waiter, timeout)
        except TimeoutError:
            return False
        finally:
            waiters = self._awaiting.get(device_id, [])
            if waiter in waiters:
                waiters.remove(waiter)
                if not waiters:
                    del self._awaiting[device_id]

    def _subscribed(self, device_id: int) -> None:
        self.subscribed.add(device_id)
        for waiter in self._awaiting.pop(device_id, ()):
            if not waiter.done():
                waiter.set_result(True)

    def detach(self, socket: Socket) -> None:
        sockets = self.sockets.get(socket.device_id)
        if sockets is not None:
            sockets.discard(socket)
            if not sockets:
                del self.sockets[socket.device_id]
                self._send_owed(socket.device_id)
                self.reconciled.discard(socket.device_id)
                self._unsettled.add(socket.device_id)
                self._changed.set()

    def all_sockets(self) -> list[Socket]:
        return [s for group in self.sockets.values() for s in group]

    def count(self) -> int:
        return sum(len(group) for group in self.sockets.values())

    def dispatch(self, message: dict[str, Any]) -> None:
        """Hand a message from the layer (or a local publisher) to the device's sockets."""
        if message.get("type") == "qprint.probe":
            probe = self._probe
            if probe and probe[0] == message.get("token") and not probe[1].done():
                probe[1].set_result(True)
            return
        try:
            device_id = int(message.get("device_id"))
        except (TypeError, ValueError):
            return
        for socket in list(self.sockets.get(device_id, ())):
            socket.deliver(message)

    def deliver_ahead(self, message: dict[str, Any], copy: Callable[[], None]) -> bool:
        """From any thread: hand a wakeup that this process publishes through the layer to its
        device's sockets here now, and remember it so that its copy through the layer is dropped
        (:meth:`from_layer`). ``copy`` sends that copy: on this loop, at once, unless a socket
        of the device here reads its row on every wakeup (then when :meth:`settle` says so).
        False when no socket of the device is here (nothing done, ``copy`` not called)."""
        if message.get("device_id") not in self.sockets:  # a dict lookup: safe from a thread
            return False
        key = self._remember_ahead(message)
        try:
            self.loop.call_soon_threadsafe(self._hand_ahead, message, key, copy)
        except RuntimeError:  # the loop closed meanwhile
            with self._ahead_lock:
                self._ahead.pop(key, None)
            return False
        return True

    def _hand_ahead(
        self, message: dict[str, Any], key: tuple[Any, ...] | None, copy: Callable[[], None]
    ) -> None:
        sockets = self.sockets.get(message.get("device_id"), ())
        if key is not None and any(socket.reads_row_on_wakeup for socket in sockets):
            timer = self.loop.call_later(OWED_COPY_SECONDS, self.settle, message, False)
            self._owed[key] = (copy, timer)
        else:
            copy()
        self.dispatch(message)

    def settle(self, message: dict[str, Any], held: bool) -> None:
        """A socket here handled a wakeup (on the loop): ``held`` when it read its device's row in
        the claim's lock and its connection held the row. The copy owed through the layer, if
        any, is then never sent: a socket of the device that takes the row later (on another
        node) reads the row after taking it, and finds what this wakeup would tell it. Otherwise
        (the row taken, the read failed or did not happen) the copy is sent now."""
        key = _ahead_key(message)
        owed = self._owed.pop(key, None) if key is not None else None
        if owed is None:
            return
        copy, timer = owed
        timer.cancel()
        if held:
            self.copies_saved += 1
            with self._ahead_lock:
                self._ahead.pop(key, None)  # no copy comes back
        else:
            copy()

    def _send_owed(self, device_id: int | None = None) -> None:
        """Send the owed copies of ``device_id``'s wakeups (every device's: None), when no socket
        is left here to read the row."""
        # A key's second item is its wakeup's device (:func:`_ahead_key`).
        for key in [key for key in self._owed if device_id is None or key[1] == device_id]:
            copy, timer = self._owed.pop(key)
            timer.cancel()
            copy()

    def _remember_ahead(self, message: dict[str, Any]) -> tuple[Any, ...] | None:
        """Remember a message handed to this process's sockets ahead of its copy through the
        layer (at most :data:`AHEAD_MAX`, for :data:`AHEAD_SECONDS`); its key."""
        key, now = _ahead_key(message), time.monotonic()
        if key is None:
            return None
        with self._ahead_lock:
            self._ahead[key] = now
            while (
                len(self._ahead) > AHEAD_MAX
                or next(iter(self._ahead.values())) < now - AHEAD_SECONDS
            ):
                self._ahead.popitem(last=False)
        return key

    def from_layer(self, message: dict[str, Any]) -> None:
        """Hand a message received through the layer to its device's sockets, unless it is the
        copy of one this process handed them ahead (:meth:`deliver_ahead`, :meth:`publish`)."""
        key = _ahead_key(message)
        if key is not None:
            with self._ahead_lock:
                ahead = self._ahead.pop(key, None)
            if ahead is not None:
                self.copies_dropped += 1
                return
        self.dispatch(message)

    def deliver_to_all(self, message: dict[str, Any], sockets: Iterable[Socket] | None = None):
        for socket in list(sockets if sockets is not None else self.all_sockets()):
            socket.deliver(message)

    # -- publishing -------------------------------------------------------------------------

    async def publish(self, device_id: int, message: dict[str, Any]) -> bool:
        """Best-effort group_send from the socket path (``replaced``); False when it failed.

        A failure is counted, never taken for an outage: during a connect burst the loop itself
        may be too busy to finish a send in time while Redis is fine. The probe alone decides
        whether the bus is down."""
        if self.layer is None:
            return False
        # This process's sockets learn it at once, whatever Redis does; its copy through the
        # layer is dropped when it comes back (:meth:`from_layer`).
        self.dispatch(message)
        if isinstance(self.publishing, InMemoryChannelLayer):
            return True  # one process: the in-memory layer is bound to one loop anyway
        self._remember_ahead(message)
        try:
            await asyncio.wait_for(
                self.publishing.group_send(device_group(device_id), message),
                LAYER_TIMEOUT_SECONDS,
            )
            return True
        except Exception as exc:
            self.publish_failures += 1
            logger.debug("bus_publish_failed device=%s error=%r", device_id, exc)
            return False

    # -- the background loop ------------------------------------------------------------------

    def _start(self) -> None:
        if self.layer is None or self._tasks:
            return
        self._tasks = [
            self.loop.create_task(self._receive_loop(), name="qprint-bus-receive"),
            self.loop.create_task(self._maintain_loop(), name="qprint-bus-maintain"),
            self.loop.create_task(self._lag_loop(), name="qprint-bus-lag"),
        ]
        if cross_process_layer(self.publishing):
            process_publisher().send_on(self.loop, self.publishing)

    async def stop(self) -> None:
        # A flag as well as cancel(): Python 3.11's wait_for() can swallow a cancellation.
        self._stopping = True
        self._send_owed()
        process_publisher().stop_sending_on(self.loop)
        for task in self._tasks:
            task.cancel()
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=1)
        self._tasks = []

    async def _receive_loop(self) -> None:
        while not self._stopping:
            if self.channel is None:
                try:
                    self.channel = await asyncio.wait_for(
                        self.layer.new_channel("qprint.node."), LAYER_TIMEOUT_SECONDS
                    )
                    self._changed.set()
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    self._set_down(f"new_channel: {exc!r}")
                    await asyncio.sleep(1)
                    continue
            try:
                message = await self.layer.receive(self.channel)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the core layer's blocking read fails while Redis is down
                self._set_down(f"receive: {exc!r}")
                await asyncio.sleep(0.5)
                continue
            self.from_layer(message)

    async def _maintain_loop(self) -> None:
        interval = float(qprint_settings.BUS_PROBE_SECONDS)
        next_probe = time.monotonic()
        while not self._stopping:
            # Cleared before the pass, not after: a socket attached while the pass awaits the
            # layer sets it again, and the next pass subscribes its device at once (cleared
            # after, that socket would wait for the next probe, its wakeups missed meanwhile).
            self._changed.clear()
            try:
                await self._sync_groups()
                self._refresh_groups_if_expiring()
                if time.monotonic() >= next_probe and self.channel is not None:
                    next_probe = time.monotonic() + interval
                    await self._run_probe()
            except asyncio.CancelledError:
                raise
            except Exception:  # never let the loop die: it is the outage detector
                logger.exception("bus_maintain_failed")
            timeout = max(0.05, next_probe - time.monotonic())
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._changed.wait(), timeout)

    async def _lag_loop(self, tick: float = 0.25) -> None:
        """How late the loop runs: a sleep of ``tick`` that ends later than asked."""
        while not self._stopping:
            started = self.loop.time()
            await asyncio.sleep(tick)
            self.max_lag = max(self.max_lag, self.loop.time() - started - tick)

    async def _sync_groups(self) -> None:
        """Subscribe the groups of the devices that have a socket here and give up those of the
        devices that have none, among the unsettled ones (subscriptions first). A subscription
        that fails ends the pass; it and the devices after it stay unsettled for the next one."""
        if self.channel is None:
            return
        unsettled, self._unsettled = self._unsettled, set()
        adds = sorted(d for d in unsettled if d in self.sockets and d not in self.subscribed)
        discards = sorted(d for d in unsettled if d not in self.sockets and d in self.subscribed)
        for index, device_id in enumerate(adds):
            if device_id not in self.sockets or device_id in self.subscribed:
                continue  # its socket left, or it was subscribed, while the pass awaited
            try:
                await asyncio.wait_for(
                    self.layer.group_add(device_group(device_id), self.channel),
                    LAYER_TIMEOUT_SECONDS,
                )
            except Exception as exc:
                self._unsettled.update(adds[index:], discards)
                if isinstance(exc, TimeoutError):
                    self._slow("group_add")
                else:
                    self._failed("group_add", exc)
                return
            self._subscribed(device_id)
            if device_id not in self.reconciled:
                # A wakeup published before the first subscription was missed: read the row now.
                # (A re-subscription after an outage or for the group expiry needs no read of
                # its own: the outage's reconcile covers it.)
                # A socket whose row was read after this moment has nothing to catch up.
                self.reconciled.add(device_id)
                self.deliver_to_all(
                    {
                        "type": "qprint.reconcile",
                        "device_id": device_id,
                        "subscribed_at": time.monotonic(),
                    },
                    self.sockets.get(device_id, ()),
                )
        for device_id in discards:
            if device_id in self.sockets or device_id not in self.subscribed:
                continue  # a socket of the device attached while the pass awaited
            self.subscribed.discard(device_id)
            try:
                await asyncio.wait_for(
                    self.layer.group_discard(device_group(device_id), self.channel),
                    LAYER_TIMEOUT_SECONDS,
                )
            except TimeoutError:
                self._slow("group_discard")
            except Exception as exc:
                self._failed("group_discard", exc)

    def _resubscribe_all(self) -> None:
        """Forget the subscriptions (Redis may have lost or expired them): the next pass
        subscribes the group of every device with a socket here again."""
        self.subscribed.clear()
        self._unsettled.update(self.sockets)
        self._changed.set()

    def _refresh_groups_if_expiring(self) -> None:
        expiry = getattr(self.layer, "group_expiry", None)
        if not isinstance(expiry, (int, float)) or expiry <= 0:
            return
        if time.monotonic() - self._groups_refreshed_at >= expiry / 3:
            self._groups_refreshed_at = time.monotonic()
            self._resubscribe_all()

    async def _run_probe(self) -> None:
        token = uuid.uuid4().hex
        future = self.loop.create_future()
        self._probe = (token, future)
        self.max_lag = 0.0
        attached = self.attached
        try:
            await asyncio.wait_for(
                self.layer.send(self.channel, {"type": "qprint.probe", "token": token}),
                LAYER_TIMEOUT_SECONDS,
            )
            await asyncio.wait_for(future, LAYER_TIMEOUT_SECONDS)
        except asyncio.CancelledError:
            raise
        except TimeoutError as exc:
            burst = self.attached - attached
            if burst >= BURST_SOCKETS_EXCUSE and self.up:
                self.excused_timeouts += 1
                logger.info("bus_late what=probe connects=%d", burst)
                return
            self._probe_timeouts += 1
            if self._probe_timeouts >= PROBE_TIMEOUTS_FOR_OUTAGE or not self.up:
                self._failed("probe", exc)
            return
        except Exception as exc:
            self._set_down(f"probe: {exc!r}")
            return
        finally:
            self._probe = None
        self._probe_timeouts = 0
        if not self.up:
            self._set_up()

    def _slow(self, what: str) -> None:
        """A subscription change that timed out: counted and tried again at the next sync (a
        device not subscribed yet is in ``wanted - subscribed``); not an outage."""
        self.slow_subscriptions += 1
        logger.info("bus_slow what=%s loop_lag=%.2fs", what, self.max_lag)
        self.loop.call_later(0.5, self._changed.set)

    def _failed(self, what: str, exc: BaseException) -> None:
        """A layer operation failed: an outage, unless it only timed out while this process's
        loop ran late (then it is tried again and counted)."""
        if isinstance(exc, TimeoutError) and self.max_lag >= LOOP_LAG_EXCUSE_SECONDS:
            self.excused_timeouts += 1
            logger.info("bus_late what=%s loop_lag=%.2fs", what, self.max_lag)
            return
        self._set_down(f"{what}: {exc!r}")

    def _set_down(self, reason: str) -> None:
        if self.up:
            self.up = False
            self.outages += 1
            logger.warning("bus_down sockets=%d reason=%s", self.count(), reason)
        # No subscription is coming: the sockets waiting for one go on (the bus's return
        # reconciles every socket).
        for waiters in self._awaiting.values():
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_result(False)

    def _set_up(self) -> None:
        self.up = True
        sockets = self.all_sockets()
        logger.warning(
            "bus_up sockets=%d reconcile=all paced=%d/s", len(sockets), RECONCILE_PER_SECOND
        )
        # Memberships may have been lost with Redis (the core layer keeps them in Redis).
        self._resubscribe_all()
        if self._reconciling is not None:
            self._reconciling.cancel()
        self._reconciling = self.loop.create_task(
            self._reconcile_paced(sockets), name="qprint-bus-reconcile"
        )

    async def _reconcile_paced(self, sockets: list[Socket], batches_per_second: int = 10) -> None:
        """Every socket reconciles (reads its row), :data:`RECONCILE_PER_SECOND` a second: the
        moment the bus comes back is the moment a node is busiest."""
        batch = max(1, RECONCILE_PER_SECOND // batches_per_second)
        for start in range(0, len(sockets), batch):
            self.deliver_to_all(
                {"type": "qprint.reconcile", "reason": "bus_up"}, sockets[start : start + batch]
            )
            await asyncio.sleep(1 / batches_per_second)


_buses: dict[asyncio.AbstractEventLoop, DeviceBus] = {}


def current() -> DeviceBus:
    """The bus of the running event loop (one per Daphne process)."""
    loop = asyncio.get_running_loop()
    bus = _buses.get(loop)
    if bus is None:
        for old in [lp for lp in _buses if lp.is_closed()]:
            del _buses[old]
        layer = get_channel_layer()
        bus = _buses[loop] = DeviceBus(loop, layer, publishing_layer(layer))
    return bus


def all_buses() -> list[DeviceBus]:
    return [bus for loop, bus in list(_buses.items()) if not loop.is_closed()]


def deliver_locally(message: dict[str, Any]) -> int:
    """Hand ``message`` to the sockets of this process (thread-safe); returns how many loops."""
    delivered = 0
    for bus in all_buses():
        try:
            bus.loop.call_soon_threadsafe(bus.dispatch, message)
            delivered += 1
        except RuntimeError:  # the loop closed meanwhile
            continue
    return delivered


def deliver_ahead(message: dict[str, Any], copy: Callable[[], None]) -> bool:
    """Hand a wakeup that this process publishes through the layer to its device's sockets in
    this process now (thread-safe), ahead of its copy through the layer, which is then dropped
    here: a device whose socket is on the submitting node is woken without the round trip through
    Redis. ``copy`` sends the copy (once): True when a socket of the device is here, whose bus
    sends it (:meth:`DeviceBus.deliver_ahead`); False, nothing done: the caller sends it."""
    once = _Once(copy)
    return any([bus.deliver_ahead(message, once) for bus in all_buses()])


class _Once:
    """``send``, called at most once from any number of buses' loops."""

    def __init__(self, send: Callable[[], None]) -> None:
        self._send: Callable[[], None] | None = send
        self._lock = threading.Lock()

    def __call__(self) -> None:
        with self._lock:
            send, self._send = self._send, None
        if send is not None:
            send()


def open_sockets() -> int:
    return sum(bus.count() for bus in all_buses())


def bus_up() -> bool:
    return all(bus.up for bus in all_buses())
