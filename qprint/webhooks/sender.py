"""The webhook sender: a ``cluster_runtime`` worker on every node (``tasks.register_worker``).

One asyncio loop per process takes due deliveries from the outbox
(``outbox_taking.take_due``, ``FOR UPDATE SKIP LOCKED``: nodes share the work, never a row), sends
each with ``httpx`` and records the answer (``outbox_taking.record_attempt``). At most
``QPRINT["WEBHOOK_MAX_IN_FLIGHT"]`` requests are in flight; rows are taken only for free slots,
fairly between endpoints and tenants and within their caps (``outbox_taking.take_due``), so a slow
receiver holds a few slots of its tenant's, not the outbox.

Each attempt: the URL's host is resolved and every address checked
(``destinations.resolve_checked``), then the request goes to **that address**: the URL's host is
replaced by the checked IP while the ``Host`` header and the TLS server name (``sni_hostname``,
which the certificate is verified against) stay the URL's host name. Connect and read timeouts,
a total deadline of ``SEND_TIMEOUT_SECONDS``, redirects not followed (a 3xx is a failed attempt).

It wakes on the ``qprint.webhooks`` group of the channel layer (published after the commit that
wrote a delivery) and in-process notices, and polls every :data:`POLL_SECONDS` whatever happens,
so it is correct without Redis. Database work runs on one thread of its own (a
:class:`qprint.core.executor.DatabaseThreads` of one, like the transports' threads).
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import threading
import time
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import httpx
from django.utils import timezone

from qprint.core.conf import qprint_settings
from qprint.core.executor import DatabaseThreads
from qprint.webhooks import destinations, notify, outbox, outbox_taking, signing

logger = logging.getLogger("qprint.webhooks.sender")

WORKER_NAME = "qprint.webhooks"
POLL_SECONDS = 1.0
#: The channel-layer group membership is renewed this often (channels-redis expires groups).
RELISTEN_SECONDS = 600.0
MAX_CLIENTS = 256
LATENCY_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 60.0, 600.0)


@dataclass
class SenderFigures:
    """This process's attempts by outcome and the latency (event -> 2xx answer) histogram."""

    attempts: dict[str, int] = field(
        default_factory=lambda: {"delivered": 0, "failed": 0, "refused": 0}
    )
    latency_buckets: list[int] = field(default_factory=lambda: [0] * len(LATENCY_BUCKETS))
    latency_count: int = 0
    latency_sum: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def attempt(self, outcome: str, latency: float | None = None) -> None:
        with self.lock:
            self.attempts[outcome] += 1
            if latency is not None:
                self.latency_count += 1
                self.latency_sum += latency
                for i, bound in enumerate(LATENCY_BUCKETS):
                    if latency <= bound:
                        self.latency_buckets[i] += 1


figures = SenderFigures()


class Sender:
    def __init__(
        self,
        max_in_flight: int | None = None,
        poll_seconds: float = POLL_SECONDS,
        verify: ssl.SSLContext | bool = True,
    ):
        """``verify``: how receivers' certificates are checked (default: the system's CAs as
        httpx has them; tests pass a context trusting their own)."""
        self.verify = verify
        self.max_in_flight = max(1, int(max_in_flight or qprint_settings.WEBHOOK_MAX_IN_FLIGHT))
        self.poll_seconds = poll_seconds
        #: One thread of its own: the outbox's statements never queue behind a request's.
        self.db = DatabaseThreads("webhooks", threads=1)
        self.clients: dict[tuple[str, str, str, int], httpx.AsyncClient] = {}
        self.in_flight: set[asyncio.Task] = set()

    # --- entry point ----------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        """Send until ``stop`` is set, then finish the attempts in flight (a worker's body)."""
        try:
            asyncio.run(self._main(stop))
        finally:
            self.db.shutdown()

    async def _main(self, stop: threading.Event) -> None:
        logger.info("webhook_sender_started max_in_flight=%s", self.max_in_flight)
        try:
            while not stop.is_set():
                async with notify.listening(notify.DELIVERIES_KEY, notify.DELIVERIES_GROUP) as wake:
                    await self._serve(stop, wake, time.monotonic() + RELISTEN_SECONDS)
            if self.in_flight:
                await asyncio.wait(self.in_flight)
        finally:
            for client in self.clients.values():
                await client.aclose()
            logger.info("webhook_sender_stopped")

    async def _serve(self, stop: threading.Event, wake: asyncio.Event, until: float) -> None:
        failures = 0
        while not stop.is_set() and time.monotonic() < until:
            free = self.max_in_flight - len(self.in_flight)
            if self.in_flight and free < self.max_in_flight // 2:
                free = 0  # take in batches: one transaction for several rows, not one per row
            wake.clear()
            try:
                taken = await self._on_db(outbox_taking.take_due, free) if free else []
                failures = 0
            except Exception as exc:
                failures += 1
                logger.warning("webhook_take_failed attempt=%s error=%s", failures, exc)
                await asyncio.sleep(min(30.0, 0.5 * 2 ** min(failures, 6)))
                continue
            for due in taken:
                task = asyncio.create_task(self._deliver(due))
                self.in_flight.add(task)
                task.add_done_callback(self.in_flight.discard)
            if free and len(taken) == free:
                continue  # more may be due: take again as soon as a slot frees up
            # No free slot: wait for one; else for a notice (or the poll).
            waits: list[Any] = (
                list(self.in_flight) if not free else [asyncio.ensure_future(wake.wait())]
            )
            _done, pending = await asyncio.wait(
                waits, timeout=self.poll_seconds, return_when=asyncio.FIRST_COMPLETED
            )
            for future in pending:
                if future not in self.in_flight:
                    future.cancel()

    async def _on_db(self, func, *args):
        return await self.db.run(func, *args)

    # --- one attempt ----------------------------------------------------------------------------

    async def _deliver(self, due: outbox_taking.Due) -> None:
        deadline = time.monotonic() + outbox_taking.LEASE_SECONDS - 5
        outcome, kind = await self._attempt(due, deadline)
        latency = None
        if outcome.delivered:
            latency = max(0.0, (timezone.now() - due.created_at).total_seconds())
        figures.attempt(kind, latency)
        for attempt in range(5):
            try:
                await self._on_db(outbox_taking.record_attempt, due, outcome)
                return
            except Exception as exc:  # the lease runs out and the row is sent again: at least once
                logger.warning("webhook_record_failed delivery=%s error=%s", due.id, exc)
                await asyncio.sleep(0.5 * 2**attempt)

    async def _attempt(
        self, due: outbox_taking.Due, deadline: float
    ) -> tuple[outbox_taking.Outcome, str]:
        loop = asyncio.get_running_loop()
        try:
            destination = destinations.parse(due.url)
            address = await loop.run_in_executor(None, destinations.resolve_checked, destination)
        except destinations.Refused as exc:
            logger.info("webhook_refused delivery=%s reason=%s", due.id, exc.detail)
            return outbox_taking.Outcome(error=f"refused: {exc}"), "refused"
        body = due.body
        headers = {
            **signing.headers(due.event_id, timezone.now(), body, due.keys),
            "content-type": "application/json",
            "user-agent": "qprint-webhooks",
        }
        url = destination.url
        headers["host"] = url.netloc.decode("ascii")
        extensions = {"sni_hostname": destination.host} if destination.scheme == "https" else {}
        client = self._client(destination, address)
        timeout = min(outbox_taking.SEND_TIMEOUT_SECONDS, deadline - time.monotonic())
        started = time.monotonic()
        try:
            request = client.build_request(
                "POST",
                url.copy_with(host=address),
                content=body.encode(),
                headers=headers,
                extensions=extensions,
            )
            response = await asyncio.wait_for(self._send(client, request), timeout)
        except TimeoutError:
            took = time.monotonic() - started
            return outbox_taking.Outcome(
                error=f"timed out after {timeout:.0f} s", seconds=took
            ), "failed"
        except httpx.HTTPError as exc:
            took = time.monotonic() - started
            return outbox_taking.Outcome(
                error=f"{type(exc).__name__}: {exc}", seconds=took
            ), "failed"
        status, answer = response
        took = time.monotonic() - started
        outcome = outbox_taking.Outcome(status_code=status, answer=answer, seconds=took)
        return outcome, "delivered" if outcome.delivered else "failed"

    @staticmethod
    async def _send(client: httpx.AsyncClient, request: httpx.Request) -> tuple[int, str]:
        response = await client.send(request, stream=True)
        try:
            kept = b""
            async for chunk in response.aiter_bytes():
                kept += chunk
                if len(kept) >= outbox_taking.ANSWER_CHARS:
                    break
            return response.status_code, kept[: outbox_taking.ANSWER_CHARS].decode(
                "utf-8", "replace"
            )
        finally:
            await response.aclose()

    def _client(self, destination: destinations.Destination, address: str) -> httpx.AsyncClient:
        """A client per (scheme, host name, address, port): a kept-alive connection is only
        reused for the host name (TLS server name) it was opened and verified for."""
        key = (destination.scheme, destination.host, address, destination.port)
        client = self.clients.get(key)
        if client is None:
            if len(self.clients) >= MAX_CLIENTS:
                oldest = self.clients.pop(next(iter(self.clients)))
                asyncio.get_running_loop().create_task(oldest.aclose())
            client = httpx.AsyncClient(
                timeout=httpx.Timeout(outbox_taking.SEND_TIMEOUT_SECONDS, connect=5.0),
                follow_redirects=False,
                trust_env=False,
                verify=self.verify,
                limits=httpx.Limits(max_connections=8, max_keepalive_connections=2),
            )
            self.clients[key] = client
        return client


def run_worker(stop: threading.Event) -> None:
    """The ``cluster_runtime`` worker: one sender for the process's life."""
    Sender().run(stop)


def register_worker() -> None:
    """Register the sender and the deliveries' retention with ``cluster_runtime`` (called from
    ``QPrintConfig.ready``)."""
    from qprint.core import cluster

    cluster.register_worker(WORKER_NAME, run_worker)
    cluster.register_task(
        "qprint.delete-old-deliveries", timedelta(hours=1), outbox.delete_old_deliveries
    )
