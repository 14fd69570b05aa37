"""The node's runtime loop behind ``manage.py cluster_runtime``.

Threads and why:

- the **main thread** keeps time (a monotonic clock), watches the stop flag that the SIGTERM/SIGINT
  handler sets (the handler does nothing else) and decides when to exit. It never talks to the
  database, so a database call that hangs cannot keep the process alive past the drain grace: the
  main thread then exits with ``os._exit``;
- one **database thread** runs every statement of the runtime (heartbeat, leases, sweep), in order;
- a small **task pool** runs the singleton tasks, so a long task does not delay the heartbeat;
- one thread per registered **worker** (``qcluster.tasks.register_worker``), on every node while it
  is UP: told to stop when the node drains, waited for like the running tasks.

States of this node (one log line per change): UP -> DRAINING (a drain request from the admin, or
a signal) -> STOPPED (exit 0). A drain requested from the admin holds DRAINING for
``DRAIN_GRACE_SECONDS`` (web traffic moves away; the drain can be cancelled, back to UP); a drain
started by a signal stops as soon as the running tasks finished, at most after the grace. Database
errors are retried with exponential backoff and logged; the process exits non-zero only when told
to stop while it could not record that it stopped.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import timedelta
from typing import TypeVar

from django.db import DatabaseError, close_old_connections, connections

from qcluster import gauges, leases, nodes, runtime_config, signals, sweeper, tasks
from qcluster.conf import cluster_settings
from qcluster.identity import NodeIdentity
from qcluster.models import LIVE_STATUSES, ClusterSetting, NodeStatus
from qcluster.workers import MAX_BACKOFF_SECONDS, WorkerThreads

logger = logging.getLogger("qcluster.runtime")

T = TypeVar("T")

#: After a stop request, the grace plus this long to record STOPPED; then the process exits
#: whatever the database is doing.
STOP_RECORD_SECONDS = 5
#: How often the main thread looks at its flags while it waits.
TICK_SECONDS = 0.1

#: The runtime's own phase is one of these two node statuses (then it records STOPPED).
UP, DRAINING = NodeStatus.UP, NodeStatus.DRAINING


class StopRequested(Exception):
    """The process was told to stop while it waited for the database."""


@dataclass
class _TaskState:
    task: tasks.SingletonTask
    holding: bool = False
    next_due: float = 0.0
    future: Future | None = None

    @property
    def running(self) -> bool:
        return self.future is not None and not self.future.done()


def _memory_rss_bytes() -> int | None:
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def _first_line(exc: Exception) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


class ClusterRuntime:
    def __init__(self, node: NodeIdentity, *, once: bool = False) -> None:
        self.node = node
        self.once = once
        self.leases = leases.as_node(node.node_id)
        self.config = runtime_config.DEFAULT
        self.phase = UP
        self.drain_reason = ""
        self.drain_started = 0.0
        self.stop_signal: int | None = None  # written by the signal handler, nothing else
        self.hard_deadline: float | None = None
        self.is_sweeper = False
        self.sweeper_armed = False
        self.watch = sweeper.SweeperWatch()
        self.last_heartbeat: float | None = None
        self.db_failures = 0
        self.task_states = {t.name: _TaskState(t) for t in tasks.registered()}
        self.db = ThreadPoolExecutor(1, thread_name_prefix="qcluster-db")
        self.pool_size = max(1, len(self.task_states))
        self.pool = ThreadPoolExecutor(self.pool_size, thread_name_prefix="qcluster-task")
        self.workers = WorkerThreads(node.node_id, tasks.registered_workers())

    # --- signals and time (main thread) -------------------------------------------------------

    def install_signal_handlers(self) -> None:
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self._on_signal)
            signal.signal(signal.SIGINT, self._on_signal)

    def _on_signal(self, signum: int, frame: object) -> None:
        self.stop_signal = signum  # only a flag: the main loop does the rest

    def _stop_requested(self) -> bool:
        if self.stop_signal is not None and self.hard_deadline is None:
            self.hard_deadline = (
                time.monotonic() + cluster_settings.DRAIN_GRACE_SECONDS + STOP_RECORD_SECONDS
            )
        return self.stop_signal is not None

    def _check_hard_deadline(self) -> None:
        if self.hard_deadline is not None and time.monotonic() >= self.hard_deadline:
            logger.error(
                "exit_forced node=%s reason=grace_expired grace_seconds=%s",
                self.node.node_id,
                cluster_settings.DRAIN_GRACE_SECONDS,
            )
            logging.shutdown()
            os._exit(1)

    def _sleep(self, seconds: float, wake_on_stop: bool = True) -> None:
        """Sleep on the monotonic clock, waking early when a stop is requested, and, once the
        drain of a signal runs, as soon as it is finished (nothing left running): a stop does
        not wait for the next heartbeat."""
        deadline = time.monotonic() + seconds
        while (remaining := deadline - time.monotonic()) > 0:
            stopping = wake_on_stop and self._stop_requested()
            if stopping and (self.drain_reason != "signal" or self._drain_finished()):
                return
            self._check_hard_deadline()
            time.sleep(min(TICK_SECONDS, remaining))

    def _on_db(self, func: Callable[[], T]) -> T:
        """Run ``func`` on the database thread; wait for it, but never past the hard deadline."""
        future = self.db.submit(self._db_call, func)
        while True:
            try:
                return future.result(timeout=TICK_SECONDS)
            except TimeoutError:
                self._stop_requested()
                self._check_hard_deadline()

    @staticmethod
    def _db_call(func: Callable[[], T]) -> T:
        close_old_connections()
        try:
            return func()
        except DatabaseError:
            connections.close_all()  # reconnect on the next attempt
            raise

    def _with_retry(self, what: str, func: Callable[[], T], stop_on_signal: bool = False) -> T:
        """Run ``func`` on the database thread until it succeeds, backing off between attempts.

        With ``stop_on_signal``, a stop request ends the retries with ``StopRequested``; without,
        only the hard deadline after a stop request ends them (``os._exit(1)``).
        """
        while True:
            try:
                value = self._on_db(func)
            except Exception as exc:
                self.db_failures += 1
                delay = min(MAX_BACKOFF_SECONDS, 0.5 * 2 ** min(self.db_failures - 1, 10))
                if isinstance(exc, DatabaseError):
                    logger.warning(
                        "database_unavailable node=%s doing=%s attempt=%d retry_in=%.1fs error=%s",
                        self.node.node_id,
                        what,
                        self.db_failures,
                        delay,
                        _first_line(exc),
                    )
                else:  # a bug must not kill the heartbeat: log it whole, retry like an outage
                    logger.exception(
                        "cycle_failed node=%s doing=%s attempt=%d retry_in=%.1fs",
                        self.node.node_id,
                        what,
                        self.db_failures,
                        delay,
                    )
                if stop_on_signal and self._stop_requested():
                    raise StopRequested from exc
                self._sleep(delay, wake_on_stop=stop_on_signal)
                if stop_on_signal and self._stop_requested():
                    raise StopRequested from exc
                continue
            if self.db_failures:
                logger.info(
                    "database_available node=%s after_attempts=%d",
                    self.node.node_id,
                    self.db_failures,
                )
                self.db_failures = 0
            return value

    # --- the loop -----------------------------------------------------------------------------

    def run(self) -> int:
        """Run until stopped; the exit code (0 after a clean STOPPED).

        Call ``install_signal_handlers()`` first in a process of its own (the command does).
        """
        try:
            self._with_retry("register", self._register, stop_on_signal=True)
        except StopRequested:
            logger.error("exit_unregistered node=%s reason=database_unavailable", self.node.node_id)
            return self._shutdown(1)
        logger.info(
            "node_started node=%s roles=%s version=%s pid=%s",
            self.node.node_id,
            ",".join(self.node.roles),
            self.node.version,
            os.getpid(),
        )
        if not self.once:
            self.workers.start()
        while True:
            started = time.monotonic()
            if self._stop_requested() and self.drain_reason != "signal":
                self._with_retry("drain", lambda: self._begin_drain("signal"))
            try:
                self._with_retry(
                    "heartbeat", self._cycle, stop_on_signal=self.drain_reason != "signal"
                )
            except StopRequested:
                continue  # start (or carry on) the drain at the top of the loop
            if self.phase == DRAINING and self._drain_finished():
                return self._finish()
            if self.once:
                if self.phase == DRAINING:
                    self._wait_for_tasks()
                    return self._finish()
                self._wait_for_tasks()
                return self._shutdown(0)
            self._sleep(self.config.heartbeat_seconds - (time.monotonic() - started))

    def _register(self) -> None:
        self.config = ClusterSetting.objects.load_config()
        if self.once and nodes.node_status(self.node.node_id) in (*LIVE_STATUSES, NodeStatus.LOST):
            # A cron cycle continues the node's life: a pending drain request must survive it.
            return
        nodes.register_start(self.node, self._live_fields())
        self.last_heartbeat = time.monotonic()

    def _live_fields(self) -> nodes.LiveFields:
        return nodes.LiveFields(
            pid=os.getpid(),
            worker_threads=self.pool_size,
            scheduler_enabled=self.phase == UP and bool(self.task_states),
            running_tasks=sum(1 for s in self.task_states.values() if s.running),
            connections=gauges.read("connections", self.node.node_id),
            memory_rss_bytes=_memory_rss_bytes(),
        )

    def _cycle(self) -> None:
        """One heartbeat, and the duties that come with it (database thread)."""
        self.config = ClusterSetting.objects.load_config()
        beat = nodes.heartbeat(self.node, self._live_fields())
        now = time.monotonic()
        gap = now - self.last_heartbeat if self.last_heartbeat is not None else 0.0
        self.last_heartbeat = now
        if beat.recovered_from_lost:
            logger.warning(
                "node_recovered node=%s was=LOST gap_seconds=%.1f", self.node.node_id, gap
            )
        if beat.recreated:
            logger.warning("node_registered_again node=%s", self.node.node_id)
        if self.phase == UP:
            if beat.drain_requested or beat.status == NodeStatus.DRAINING:
                self._begin_drain("request")
                return
            self._sweeper_duty(gap)
            self._task_duty()
        elif self.drain_reason == "request" and beat.status == NodeStatus.UP:
            if not beat.drain_requested:
                self.phase, self.drain_reason = UP, ""
                logger.info("node_up node=%s reason=drain_cancelled", self.node.node_id)
                if not self.once:
                    self.workers.start()
        elif beat.status != NodeStatus.DRAINING:
            nodes.mark_draining(self.node.node_id)

    # --- the sweeper --------------------------------------------------------------------------

    def _sweeper_duty(self, gap: float) -> None:
        ttl = timedelta(seconds=self.config.sweeper_ttl_seconds)
        name = leases.SWEEPER_LEASE
        if self.is_sweeper:
            if not self.leases.renew(name, ttl):
                self._lose_sweeper("lease_lost")
        elif self.leases.try_acquire(name, ttl):
            self.is_sweeper = True
            self.watch.start()
            logger.info(
                "sweeper_acquired node=%s arms_in=%ss",
                self.node.node_id,
                self.config.lost_after_seconds,
            )
        if not self.is_sweeper:
            return
        if self.watch.heartbeat(gap, self.config.heartbeat_seconds) and self.sweeper_armed:
            self.sweeper_armed = False
            logger.warning(
                "sweeper_disarmed node=%s reason=late_heartbeat gap_seconds=%.1f",
                self.node.node_id,
                gap,
            )
        if not self._armed():
            return
        if not self.sweeper_armed:
            self.sweeper_armed = True
            logger.info("sweeper_armed node=%s", self.node.node_id)
        sweeper.sweep(self.node.node_id, self.config)

    def _armed(self) -> bool:
        if not self.once:
            return self.watch.armed(self.config.lost_after_seconds)
        # One cycle has no history of its own: held continuously long enough (database clock).
        return self.leases.held_continuously_for(
            leases.SWEEPER_LEASE, timedelta(seconds=self.config.lost_after_seconds)
        )

    def _lose_sweeper(self, reason: str) -> None:
        if self.is_sweeper:
            logger.info("sweeper_released node=%s reason=%s", self.node.node_id, reason)
        self.is_sweeper = False
        self.sweeper_armed = False
        self.watch.stop()

    # --- singleton tasks ----------------------------------------------------------------------

    def _task_duty(self) -> None:
        ttl = timedelta(seconds=self.config.sweeper_ttl_seconds)
        for state in self.task_states.values():
            lease_name = state.task.lease_name
            if state.holding:
                if not self.leases.renew(lease_name, ttl):
                    state.holding = False
                    logger.warning(
                        "task_lease_lost node=%s task=%s running=%s",
                        self.node.node_id,
                        state.task.name,
                        state.running,
                    )
            elif self.leases.try_acquire(lease_name, ttl):
                state.holding = True
                state.next_due = time.monotonic()
                logger.info(
                    "task_lease_acquired node=%s task=%s", self.node.node_id, state.task.name
                )
            if state.holding and not state.running and time.monotonic() >= state.next_due:
                state.next_due = time.monotonic() + state.task.every.total_seconds()
                state.future = self.pool.submit(self._run_task, state.task)

    def _run_task(self, task: tasks.SingletonTask) -> None:
        close_old_connections()
        try:
            task.func()
        except Exception:
            logger.exception("task_failed node=%s task=%s", self.node.node_id, task.name)
        finally:
            connections.close_all()

    def _running_tasks(self) -> int:
        return sum(1 for s in self.task_states.values() if s.running)

    def _busy(self) -> int:
        """Running tasks plus live worker threads: what a stop waits for."""
        return self._running_tasks() + self.workers.alive()

    def _wait_for_tasks(self) -> None:
        deadline = time.monotonic() + cluster_settings.DRAIN_GRACE_SECONDS
        while self._busy() and time.monotonic() < deadline:
            self._check_hard_deadline()
            time.sleep(TICK_SECONDS)

    # --- drain and stop -----------------------------------------------------------------------

    def _begin_drain(self, reason: str) -> None:
        """DRAINING: release every lease, stop scheduling tasks, tell the host (database thread)."""
        already = self.phase == DRAINING
        self.phase, self.drain_reason = DRAINING, reason
        if already:
            logger.info("node_draining node=%s reason=%s (now stopping)", self.node.node_id, reason)
            return
        self.drain_started = time.monotonic()
        nodes.mark_draining(self.node.node_id)
        released = self.leases.release_all()
        logger.info(
            "node_draining node=%s reason=%s released_leases=%s running_tasks=%d grace_seconds=%s",
            self.node.node_id,
            reason,
            ",".join(released) or "-",
            self._running_tasks(),
            cluster_settings.DRAIN_GRACE_SECONDS,
        )
        self._lose_sweeper("draining")
        self.workers.stop.set()
        for state in self.task_states.values():
            state.holding = False
        signals.node_draining.send(sender=self.__class__, node_id=self.node.node_id)

    def _drain_finished(self) -> bool:
        waited = time.monotonic() - self.drain_started
        if waited >= cluster_settings.DRAIN_GRACE_SECONDS:
            return True
        return self.drain_reason == "signal" and not self._busy()

    def _finish(self) -> int:
        abandoned = self._busy()
        self._with_retry("stop", self._stop_row)
        logger.info(
            "node_stopped node=%s reason=%s abandoned_tasks=%d",
            self.node.node_id,
            self.drain_reason,
            abandoned,
        )
        return self._shutdown(0, abandoned=abandoned)

    def _stop_row(self) -> None:
        self.leases.release_all()
        nodes.mark_stopped(self.node.node_id)

    def _shutdown(self, code: int, abandoned: int = 0) -> int:
        self.workers.stop.set()
        self.db.submit(connections.close_all)
        self.db.shutdown(wait=False, cancel_futures=False)
        self.pool.shutdown(wait=False, cancel_futures=True)
        if abandoned:  # a task thread that would not finish must not keep the process alive
            logging.shutdown()
            os._exit(code)
        return code
