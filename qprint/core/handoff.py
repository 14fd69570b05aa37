"""The hand-off from an event loop to threads and back: how a coroutine waits for blocking work.

A node hands each database call to its database threads (:mod:`qprint.core.executor`); the agent
hands each journal write, an fsync, to its device's journal thread
(:mod:`qprint.agent.journal_thread`). Both make one such hand-off per message of a job, so its cost
counts: ``loop.run_in_executor`` on a ``ThreadPoolExecutor`` (its ``submit``, its work item, the
chaining of its future to an asyncio one) was a tenth of a busy node's samples and a sixth of an
agent's. :class:`Workers` does the least the hand-off needs: the caller puts ``(loop, asyncio
future, call)`` on a ``SimpleQueue``, a thread runs the call and settles the future on the loop
with one ``call_soon_threadsafe``.

Calls run in the order they were put when there is one thread (a device's journal writes keep
their order). A caller cancelled while its call runs does not stop it: the call finishes on its
thread and its result is dropped.

Standard library only: the agent, which runs without Django, imports it too.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

T = TypeVar("T")


class Workers:
    """``count`` threads taking calls from one queue (named ``<name>_<i>``, started with the
    first call): :meth:`run` from a coroutine, :meth:`submit` from synchronous code."""

    def __init__(
        self,
        count: int,
        name: str,
        *,
        idle: Callable[[], object] | None = None,
        linger: float = 0.0,
    ) -> None:
        """``idle``: run on a thread that has had no call for ``linger`` seconds, before it waits
        for the next (what a thread holds between calls, given back once it has nothing to do);
        it must not raise, or the thread ends."""
        self.count = count
        self.name = name
        self.queue: queue.SimpleQueue = queue.SimpleQueue()
        self.threads: list[threading.Thread] = []
        self.idle = idle
        self.linger = linger
        self._lock = threading.Lock()

    def _start(self) -> None:
        with self._lock:
            if self.threads:
                return
            for i in range(self.count):
                thread = threading.Thread(target=self._work, name=f"{self.name}_{i}", daemon=True)
                thread.start()
                self.threads.append(thread)

    def _next(self) -> Any:
        if self.idle is None:
            return self.queue.get()
        try:
            return self.queue.get(timeout=self.linger)
        except queue.Empty:
            self.idle()
            return self.queue.get()

    def _work(self) -> None:
        while True:
            item = self._next()
            if item is None:  # shutdown
                return
            loop, future, call = item
            try:
                result = call()
            except BaseException as exc:  # handed to the caller, as an executor would
                if loop is None:
                    future.set_exception(exc)
                else:
                    _settle_soon(loop, future, None, exc)
            else:
                if loop is None:
                    future.set_result(result)
                else:
                    _settle_soon(loop, future, result, None)

    async def run(self, call: Callable[[], T]) -> T:
        if not self.threads:
            self._start()
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self.queue.put((loop, future, call))
        return await future

    def shutdown(self, wait: bool = True) -> None:
        """Stop the threads once the calls queued before this one have run (``wait``: return
        when they have stopped)."""
        threads, self.threads = self.threads, []
        for _ in threads:
            self.queue.put(None)
        for thread in threads if wait else ():
            thread.join()

    def submit(self, call: Callable[[], T]) -> Future:
        """``call`` on one of the threads, from synchronous code (a ``concurrent`` future)."""
        if not self.threads:
            self._start()
        future: Future = Future()
        self.queue.put((None, future, call))
        return future


def _settle_soon(loop, future, result, exc) -> None:
    with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: nobody waits
        loop.call_soon_threadsafe(_settle, future, result, exc)


def _settle(future: asyncio.Future, result: Any, exc: BaseException | None) -> None:
    if future.cancelled():
        return
    if exc is not None:
        future.set_exception(exc)
    else:
        future.set_result(result)
