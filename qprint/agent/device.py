"""One device's life: connect, hold the socket, and keep its worker fed with wakeups.

The socket comes and goes (node killed, drained, network gone); the worker (claims, jobs,
commands, reports) lives for the whole process so a job in progress is never cut off by a
reconnect. A device stops for good only when the server refuses its credentials (401/403 at the
upgrade) or closes with 4001 (disabled or revoked); it says so in the log.

The work on each wakeup (claims, pushed assignments, resuming, reports) is the mixin
:class:`qprint.agent.device_work.WorkLoop`; this module holds the socket loop: connect, hold,
the frames in and out, the printers watched.
"""

import asyncio
import contextlib
import logging
import platform
from dataclasses import dataclass, field
from typing import Any

import httpx
from websockets.exceptions import ConnectionClosed, InvalidHandshake

from qprint.agent import __version__
from qprint.agent import protocol as p
from qprint.agent.commands import CommandRunner
from qprint.agent.config import AgentConfig, DeviceConfig
from qprint.agent.connection import (
    Backoff,
    Disposition,
    UrlRotation,
    classify_close,
    classify_handshake_failure,
    close_code,
    handshake_hint,
    handshake_status,
    open_socket,
    reconnect_jitter,
)
from qprint.agent.device_work import WorkLoop
from qprint.agent.journal_thread import AsyncJournal
from qprint.agent.operations import BearerToOwnOrigins, DeviceApi, SocketOperations
from qprint.agent.spooler_thread import AsyncSpooler
from qprint.agent.spoolers import Spooler
from qprint.agent.worker import JobRunner, Reporter
from qprint.core.wire import PUSH

logger = logging.getLogger("qprint.agent")

# Exit reasons of a device.
STOPPED = "stopped"
CREDENTIALS_REFUSED = "credentials_refused"
DISABLED = "disabled"


@dataclass
class AppliedState:
    """What the device has applied from the server: answered in every ``state`` frame."""

    control_revision: int = 0
    paused: bool = False
    settings_revision: int = 0
    settings: dict[str, Any] = field(default_factory=dict)


class DeviceAgent(WorkLoop):
    def __init__(self, config: AgentConfig, device: DeviceConfig, spooler: Spooler):
        self.config = config
        self.device = device
        self.name = device.name
        # The spooler's calls on this device's own threads (spooler_thread.py).
        self.spooler = AsyncSpooler(spooler, self.name)
        self.urls = UrlRotation(config.urls)
        self.backoff = Backoff(config.backoff_initial, config.backoff_max)
        self.journal = AsyncJournal(device.journal_path, self.name)
        self.http = httpx.AsyncClient(
            auth=BearerToOwnOrigins(device.token, (e.origin for e in self.urls.endpoints)),
            headers={"User-Agent": f"qprint-agent/{__version__} ({platform.system()})"},
            timeout=httpx.Timeout(10.0, read=30.0),
        )
        # Claims and reports as socket frames when the server offers them (--operations), and
        # pushed assignments (auto, push) instead of claims.
        self.operations = SocketOperations() if config.operations != "http" else None
        self.wants_push = config.operations in ("auto", "push")
        #: Push mode on the current connection (the server offered it and we asked).
        self.push = False
        #: Pushed assignments not handled yet (in the order they came).
        self.pushed: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        #: In push mode, claim once anyway (a job put aside is replayed by a claim, not pushed
        #: again on the same connection).
        self._claim_needed = False
        #: Where the claim loop is, and whether a wake came while its claim was on its way
        #: (:meth:`~qprint.agent.device_work.WorkLoop.on_wake_frame`).
        self._claiming: str | None = None
        self._woken_while_claim_sent = False
        self.api = DeviceApi(self.http, self.operations)
        self.reporter = Reporter(self.name, self.journal, self.http, self.api)
        self.jobs = JobRunner(
            self.name, self.journal, self.http, self.reporter, self.spooler, config.follow_timeout
        )
        self.commands = CommandRunner(
            self.name, self.journal, self.http, self.reporter, self.spooler
        )
        self.applied = AppliedState()
        self.wake = asyncio.Event()
        self.stopping = asyncio.Event()
        self.connected = False
        self.hello: p.Hello | None = None
        self.exit_reason = STOPPED
        self._ws = None
        self._hinted: set[int | None] = set()  # statuses whose hint was logged
        self._background: set[asyncio.Task] = set()
        self._retry_handle: asyncio.TimerHandle | None = None
        self._reconcile: tuple[tuple[str, str, str], ...] | None = None
        self._printers_sent: list[dict[str, Any]] | None = None

    @property
    def endpoints(self) -> p.Endpoints:
        return self.urls.current

    # -- life --------------------------------------------------------------------------------

    async def run(self) -> str:
        """Run until stopped (SIGTERM) or refused; returns why it ended."""
        interrupted = await self.journal.recover()
        await self.journal.prune(self.config.journal_retention_days)
        for entry in interrupted:
            logger.warning(
                "job_outcome_unknown device=%s job=%s reason=interrupted_submission",
                self.name,
                entry.job_id,
            )
        worker = asyncio.create_task(self._work(), name=f"{self.name}-worker")
        try:
            await self._connect_forever()
        finally:
            self.connected = False
            self.stopping.set()
            self.wake.set()
            try:
                await asyncio.wait_for(worker, self.config.shutdown_grace)
            except TimeoutError:
                logger.warning("shutdown_grace_exceeded device=%s", self.name)
            for task in list(self._background):
                task.cancel()
            await asyncio.gather(*self._background, return_exceptions=True)
            await self.http.aclose()
            await self.journal.close()
            self.spooler.close()
        return self.exit_reason

    def request_stop(self) -> None:
        """Stop cleanly: close the socket, finish the job in hand, claim nothing more."""
        self.stopping.set()
        self.wake.set()
        if self._ws is not None:
            self._spawn(self._ws.close(1000, "agent stopping"))

    async def _sleep(self, seconds: float) -> None:
        """Sleep, but wake at once when asked to stop."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.stopping.wait(), seconds)

    def _spawn(self, coro) -> asyncio.Task:
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    # -- connection --------------------------------------------------------------------------

    async def _connect_forever(self) -> None:
        while not self.stopping.is_set():
            endpoints = self.endpoints
            disposition = Disposition.RETRY
            try:
                ws = await open_socket(endpoints, self.device.token)
            except (InvalidHandshake, OSError, TimeoutError) as exc:
                disposition = classify_handshake_failure(exc)
                status = handshake_status(exc)
                if disposition is Disposition.STOP:
                    self.exit_reason = CREDENTIALS_REFUSED
                    logger.error(
                        "credentials_refused device=%s url=%s status=%s: the server refused this "
                        "device's token; create or rotate it and restart the agent",
                        self.name,
                        endpoints.socket,
                        status,
                    )
                    return
                hint = handshake_hint(status)
                if hint and status not in self._hinted:  # once per status: the retries go on
                    self._hinted.add(status)
                    logger.warning(
                        "connect_refused device=%s url=%s status=%s: %s",
                        self.name,
                        endpoints.socket,
                        status,
                        hint,
                    )
                logger.info(
                    "connect_failed device=%s url=%s status=%s error=%s",
                    self.name,
                    endpoints.socket,
                    status,
                    exc.__class__.__name__,
                )
            except Exception:  # anything else at connect: say it, then retry like a failure
                logger.exception("connect_failed device=%s url=%s", self.name, endpoints.socket)
            else:
                disposition = await self._hold(ws, endpoints)
                if disposition is Disposition.STOP:
                    self.exit_reason = DISABLED
                    return
            if self.stopping.is_set():
                return
            if disposition is Disposition.RECONNECT_NOW:
                self.urls.advance()
                await self._sleep(reconnect_jitter())
            else:
                if len(self.urls.endpoints) > 1:
                    self.urls.advance()
                await self._sleep(self.backoff.next_delay())

    async def _hold(self, ws, endpoints: p.Endpoints) -> Disposition:
        """One connection, from hello to close."""
        self._ws = ws
        code: int | None = None
        pinger: asyncio.Task | None = None
        watcher: asyncio.Task | None = None
        try:
            hello = p.parse_hello(p.parse_frame(await asyncio.wait_for(ws.recv(), 10)))
            self.hello = hello
            self.applied.control_revision, self.applied.paused = (
                hello.control_revision,
                hello.paused,
            )
            self.applied.settings_revision = hello.settings_revision
            self.applied.settings = hello.settings
            if self.operations is not None:
                self.operations.attach(ws, hello.operations)
            self.push = self.wants_push and PUSH in hello.operations
            await self._send_state(ws)
            self.connected = True
            self.backoff.reset()
            logger.info(
                "connected device=%s node=%s connection=%s url=%s paused=%s push=%s",
                self.name,
                hello.node,
                hello.connection_id,
                endpoints.base,
                hello.paused,
                self.push,
            )
            pinger = asyncio.create_task(self._ping(ws, hello.heartbeat_seconds))
            if self.config.report_printers:
                watcher = asyncio.create_task(self._watch_printers(ws))
            if hello.active_jobs:
                self._reconcile = hello.active_jobs  # the worker answers them before claiming
            self.wake.set()
            async for message in ws:
                await self._on_frame(ws, endpoints, message)
        except ConnectionClosed as exc:
            code = close_code(exc)
        except p.ProtocolError as exc:
            logger.error("protocol_error device=%s error=%s", self.name, exc)
            await ws.close(p.CloseCode.PROTOCOL_ERROR, "bad frame")
        except TimeoutError:
            logger.warning("no_hello device=%s url=%s", self.name, endpoints.base)
            await ws.close()
        finally:
            self.connected = False
            self.push = False
            self._ws = None
            if self.operations is not None:
                self.operations.detach()
            for task in (pinger, watcher):
                if task is not None:
                    task.cancel()
        received = ws.protocol.close_rcvd
        if code is None and received is not None:
            code = received.code
        reason = received.reason if received is not None else ""
        disposition = classify_close(code)
        if self.stopping.is_set():
            logger.info("disconnected device=%s reason=stopping", self.name)
        elif disposition is Disposition.STOP:
            logger.error(
                "device_disabled device=%s code=%s reason=%s: the server disabled this "
                "device or revoked its token; the agent stops",
                self.name,
                code,
                reason,
            )
        else:
            logger.info(
                "disconnected device=%s code=%s reason=%s next=%s",
                self.name,
                code,
                reason,
                disposition.value,
            )
        return disposition

    async def _send_state(self, ws) -> None:
        push = p.INLINE_MAX_BYTES if self.push else None
        await ws.send(
            p.state_frame(self.applied.control_revision, self.applied.settings_revision, push)
        )

    async def _ping(self, ws, interval: float) -> None:
        while True:
            await asyncio.sleep(interval)
            try:
                await ws.send(p.ping_frame())
            except ConnectionClosed:
                return

    async def _on_frame(self, ws, endpoints: p.Endpoints, message) -> None:
        try:
            frame = p.parse_frame(message)
        except p.ProtocolError as exc:
            logger.warning("frame_ignored device=%s error=%s", self.name, exc)
            return
        if self.operations is not None and self.operations.deliver(frame):
            return
        kind = frame["type"]
        if p.is_pushed_assignment(frame):
            self.pushed.put_nowait(frame)
            self.wake.set()
        elif kind == "wake":
            self.on_wake_frame()
        elif kind == "control":
            revision, paused = p.parse_control(frame)
            if paused != self.applied.paused:
                logger.info(
                    "control_applied device=%s paused=%s revision=%s", self.name, paused, revision
                )
            self.applied.control_revision, self.applied.paused = revision, paused
            await self._send_state(ws)
            self.wake.set()
        elif kind == "settings":
            self.applied.settings_revision, self.applied.settings = p.parse_settings(frame)
            logger.info(
                "settings_applied device=%s revision=%s", self.name, self.applied.settings_revision
            )
            await self._send_state(ws)
            self.wake.set()
        elif kind == "command":
            try:
                command_id, command_type, payload = p.parse_command(frame)
            except p.ProtocolError as exc:
                logger.warning("command_ignored device=%s error=%s", self.name, exc)
                return
            self._spawn(self.commands.run(endpoints, command_id, command_type, payload))
        elif kind == "error":
            logger.warning(
                "server_error device=%s code=%s message=%s",
                self.name,
                frame.get("code"),
                frame.get("message"),
            )
        # hello again or a frame type from a newer protocol: nothing to do

    async def _watch_printers(self, ws) -> None:
        """Send the printers (state, capabilities) at connect, then whenever they change.

        Read every ``--printers-poll`` seconds; a ``printers`` frame goes out only when the list
        differs from the last one this device sent.
        """
        first = True
        while True:
            try:
                printers = await self.spooler.printers()
            except Exception as exc:
                logger.warning("printers_not_read device=%s error=%r", self.name, exc)
            else:
                if first or printers != self._printers_sent:
                    try:
                        await ws.send(p.printers_frame(printers))
                    except ConnectionClosed:
                        return
                    if not first:
                        logger.info("printers_changed device=%s", self.name)
                    self._printers_sent, first = printers, False
            await asyncio.sleep(self.config.printers_poll_seconds)
