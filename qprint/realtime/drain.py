"""The web process's watch on its node's qcluster status: DRAINING closes the device sockets.

``cluster_runtime`` (the node's sidecar) marks the node DRAINING (a drain from the admin, or
SIGTERM). The Daphne processes of that node learn it here, by reading the node's row every
``QPRINT["DRAIN_POLL_SECONDS"]`` through :func:`qprint.core.cluster.node_is_draining`; they then

- refuse new sockets (503 where the server supports ``websocket.http.response``, else a failed
  handshake, 500: never 403), and
- close the open ones with 4003, spread over ``QPRINT["DRAIN_SPREAD_SECONDS"]`` so the devices
  do not all reconnect to the other nodes in the same instant.

A cancelled drain (status back to UP) accepts sockets again. A failed read keeps the last known
status (a database hiccup drains nothing).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from qprint.core import cluster
from qprint.core.conf import qprint_settings
from qprint.realtime import bus, socket_db

logger = logging.getLogger("qprint.drain")


class DrainWatch:
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.node_id = cluster.node_id()
        self.draining = False
        self._checked_at: float | None = None
        self._task: asyncio.Task | None = None
        self._lock = asyncio.Lock()
        self._stopping = False

    async def is_draining(self) -> bool:
        """Whether this node refuses sockets now (reads the status once if never read)."""
        if self._checked_at is None:
            await self.check()
        self._start()
        return self.draining

    def _start(self) -> None:
        if self._task is None:
            self._task = self.loop.create_task(self._watch(), name="qprint-drain-watch")

    async def _watch(self) -> None:
        while not self._stopping:
            await asyncio.sleep(float(qprint_settings.DRAIN_POLL_SECONDS))
            try:
                await self.check()
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.exception("drain_watch_failed node=%s", self.node_id)

    async def check(self) -> None:
        async with self._lock:
            try:
                draining = await socket_db.run(cluster.node_is_draining, self.node_id)
            except Exception as exc:
                if self._checked_at is None:
                    self._checked_at = time.monotonic()
                logger.warning("drain_status_unreadable node=%s error=%r", self.node_id, exc)
                return
            self._checked_at = time.monotonic()
            if draining and not self.draining:
                self.draining = True
                self._close_sockets_spread()
            elif not draining and self.draining:
                self.draining = False
                logger.info("node_drain_cancelled node=%s", self.node_id)

    def _close_sockets_spread(self) -> None:
        device_bus = bus.current()
        sockets = device_bus.all_sockets()
        spread = float(qprint_settings.DRAIN_SPREAD_SECONDS)
        logger.info(
            "node_draining node=%s sockets=%d spread_seconds=%s", self.node_id, len(sockets), spread
        )
        for i, socket in enumerate(sockets):
            delay = spread * i / len(sockets)
            self.loop.call_later(delay, socket.deliver, {"type": "qprint.drain"})

    async def stop(self) -> None:
        self._stopping = True  # besides cancel(): Python 3.11's wait_for() may swallow it
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
            self._task = None


_watches: dict[asyncio.AbstractEventLoop, DrainWatch] = {}


def current() -> DrainWatch:
    """The drain watch of the running event loop (one per Daphne process)."""
    loop = asyncio.get_running_loop()
    watch = _watches.get(loop)
    if watch is None:
        for old in [lp for lp in _watches if lp.is_closed()]:
            del _watches[old]
        watch = _watches[loop] = DrainWatch(loop)
    return watch
