"""This process's device sockets and their one subscription to the channel layer.

Every Daphne process keeps one :class:`DeviceBus` per event loop. It holds

- the registry of the sockets open here (device id -> sockets), which the drain, the metrics and
  the reconcile walk;
- ONE channel-layer channel for the whole process, added to the group ``qprint.device.<pk>`` of
  each device that has a socket here. A message on a group reaches the process once and is
  handed to the device's sockets through their own queue (no per-socket Redis subscription);
- a probe that publishes to its own channel every ``BUS_PROBE_SECONDS`` and waits to receive it:
  the end-to-end outage detector. ``RedisPubSubChannelLayer`` reconnects and resubscribes by
  itself but calls no ``on_reconnect`` hook, so the bus learns that Redis came back from its
  probe, and then asks every socket of the process to reconcile (read its row) at once.

Nothing here closes a socket: while the layer fails, the bus logs one ``bus_down`` line, retries,
and the sockets carry on with their heartbeats (which find what a lost wakeup would have said).
Group membership is re-added periodically when the layer expires it (``group_expiry`` of the
core layer), so a connection older than the expiry is still woken.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Iterable
from typing import Any, Protocol

from channels.layers import InMemoryChannelLayer, get_channel_layer

from qprint.core.conf import qprint_settings

logger = logging.getLogger("qprint.bus")

#: How long one layer operation may take before the bus counts it as failed.
LAYER_TIMEOUT_SECONDS = 2.0


def device_group(device_id: int) -> str:
    """The channel-layer group of a device (docs/REALTIME.md)."""
    return f"qprint.device.{device_id}"


class Socket(Protocol):
    device_id: int

    def deliver(self, message: dict[str, Any]) -> None:
        """Queue ``message`` for the socket (never blocks)."""


class DeviceBus:
    def __init__(self, loop: asyncio.AbstractEventLoop, layer: Any) -> None:
        self.loop = loop
        self.layer = layer
        self.sockets: dict[int, set[Socket]] = {}
        self.channel: str | None = None
        self.subscribed: set[int] = set()
        # Devices whose sockets here have been reconciled after their first subscription.
        self.reconciled: set[int] = set()
        self.up = True
        self.outages = 0
        self._changed = asyncio.Event()
        self._probe: tuple[str, asyncio.Future] | None = None
        self._tasks: list[asyncio.Task] = []
        self._stopping = False
        self._groups_refreshed_at = time.monotonic()

    # -- registry ---------------------------------------------------------------------------

    def attach(self, socket: Socket) -> None:
        self.sockets.setdefault(socket.device_id, set()).add(socket)
        self._start()
        self._changed.set()

    def detach(self, socket: Socket) -> None:
        sockets = self.sockets.get(socket.device_id)
        if sockets is not None:
            sockets.discard(socket)
            if not sockets:
                del self.sockets[socket.device_id]
                self.reconciled.discard(socket.device_id)
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

    def deliver_to_all(self, message: dict[str, Any], sockets: Iterable[Socket] | None = None):
        for socket in list(sockets if sockets is not None else self.all_sockets()):
            socket.deliver(message)

    # -- publishing -------------------------------------------------------------------------

    async def publish(self, device_id: int, message: dict[str, Any]) -> bool:
        """Best-effort group_send from the socket path (``replaced``); False when it failed."""
        if self.layer is None:
            return False
        # This process's sockets learn it at once, whatever Redis does (a duplicate through the
        # layer is harmless: the messages are idempotent).
        self.dispatch(message)
        if isinstance(self.layer, InMemoryChannelLayer):
            return True  # one process: the in-memory layer is bound to one loop anyway
        try:
            await asyncio.wait_for(
                self.layer.group_send(device_group(device_id), message), LAYER_TIMEOUT_SECONDS
            )
            return True
        except Exception as exc:
            self._set_down(f"publish: {exc!r}")
            return False

    # -- the background loop ------------------------------------------------------------------

    def _start(self) -> None:
        if self.layer is None or self._tasks:
            return
        self._tasks = [
            self.loop.create_task(self._receive_loop(), name="qprint-bus-receive"),
            self.loop.create_task(self._maintain_loop(), name="qprint-bus-maintain"),
        ]

    async def stop(self) -> None:
        # A flag as well as cancel(): Python 3.11's wait_for() can swallow a cancellation.
        self._stopping = True
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
            self.dispatch(message)

    async def _maintain_loop(self) -> None:
        interval = float(qprint_settings.BUS_PROBE_SECONDS)
        next_probe = time.monotonic()
        while not self._stopping:
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
            self._changed.clear()
            timeout = max(0.05, next_probe - time.monotonic())
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._changed.wait(), timeout)

    async def _sync_groups(self) -> None:
        if self.channel is None:
            return
        wanted = set(self.sockets)
        for device_id in sorted(wanted - self.subscribed):
            try:
                await asyncio.wait_for(
                    self.layer.group_add(device_group(device_id), self.channel),
                    LAYER_TIMEOUT_SECONDS,
                )
            except Exception as exc:
                self._set_down(f"group_add: {exc!r}")
                return
            self.subscribed.add(device_id)
            if device_id not in self.reconciled:
                # A wakeup published before the first subscription was missed: read the row now.
                # (A re-subscription after an outage or for the group expiry needs no read of
                # its own: the outage's reconcile covers it.)
                self.reconciled.add(device_id)
                self.deliver_to_all(
                    {"type": "qprint.reconcile", "device_id": device_id},
                    self.sockets.get(device_id, ()),
                )
        for device_id in sorted(self.subscribed - wanted):
            self.subscribed.discard(device_id)
            try:
                await asyncio.wait_for(
                    self.layer.group_discard(device_group(device_id), self.channel),
                    LAYER_TIMEOUT_SECONDS,
                )
            except Exception as exc:
                self._set_down(f"group_discard: {exc!r}")

    def _refresh_groups_if_expiring(self) -> None:
        expiry = getattr(self.layer, "group_expiry", None)
        if not isinstance(expiry, (int, float)) or expiry <= 0:
            return
        if time.monotonic() - self._groups_refreshed_at >= expiry / 3:
            self._groups_refreshed_at = time.monotonic()
            self.subscribed.clear()  # re-added by the next _sync_groups
            self._changed.set()

    async def _run_probe(self) -> None:
        token = uuid.uuid4().hex
        future = self.loop.create_future()
        self._probe = (token, future)
        try:
            await asyncio.wait_for(
                self.layer.send(self.channel, {"type": "qprint.probe", "token": token}),
                LAYER_TIMEOUT_SECONDS,
            )
            await asyncio.wait_for(future, LAYER_TIMEOUT_SECONDS)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._set_down(f"probe: {exc!r}")
            return
        finally:
            self._probe = None
        if not self.up:
            self._set_up()

    def _set_down(self, reason: str) -> None:
        if self.up:
            self.up = False
            self.outages += 1
            logger.warning("bus_down sockets=%d reason=%s", self.count(), reason)

    def _set_up(self) -> None:
        self.up = True
        sockets = self.all_sockets()
        logger.warning("bus_up sockets=%d reconcile=all", len(sockets))
        # Memberships may have been lost with Redis (the core layer keeps them in Redis).
        self.subscribed.clear()
        self._changed.set()
        self.deliver_to_all({"type": "qprint.reconcile", "reason": "bus_up"}, sockets)


_buses: dict[asyncio.AbstractEventLoop, DeviceBus] = {}


def current() -> DeviceBus:
    """The bus of the running event loop (one per Daphne process)."""
    loop = asyncio.get_running_loop()
    bus = _buses.get(loop)
    if bus is None:
        for old in [lp for lp in _buses if lp.is_closed()]:
            del _buses[old]
        bus = _buses[loop] = DeviceBus(loop, get_channel_layer())
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


def open_sockets() -> int:
    return sum(bus.count() for bus in all_buses())


def bus_up() -> bool:
    return all(bus.up for bus in all_buses())
