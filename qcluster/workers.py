"""The worker threads of ``cluster_runtime``: one per registered worker
(``qcluster.tasks.register_worker``), on every node while it is UP.

A worker's ``run(stop)`` runs until ``stop`` is set; one that fails is logged and started again
after a backoff (0.5 s doubling, at most ``MAX_BACKOFF_SECONDS``). The threads are daemons: a
worker that will not stop must not keep the process alive (the runtime waits for them like the
running tasks, up to the drain grace).
"""

from __future__ import annotations

import logging
import threading

from django.db import close_old_connections, connections

from qcluster import tasks

logger = logging.getLogger("qcluster.runtime")

#: Longest pause before a failed worker is started again (and between two attempts of the
#: runtime when the database does not answer).
MAX_BACKOFF_SECONDS = 30.0


class WorkerThreads:
    """The registered workers of one runtime, each on a thread of its own."""

    def __init__(self, node_id: str, workers: list[tasks.Worker]) -> None:
        self.node_id = node_id
        self.workers = workers
        self.stop = threading.Event()
        self.threads: dict[str, threading.Thread] = {}

    def start(self) -> None:
        """Start every worker that is not running (after a drain was cancelled, again)."""
        self.stop.clear()
        for worker in self.workers:
            thread = self.threads.get(worker.name)
            if thread is not None and thread.is_alive():
                continue
            thread = threading.Thread(
                target=self._run,
                args=(worker,),
                name=f"qcluster-worker-{worker.name}",
                daemon=True,  # one that will not stop must not keep the process alive
            )
            self.threads[worker.name] = thread
            thread.start()
            logger.info("worker_started node=%s worker=%s", self.node_id, worker.name)

    def alive(self) -> int:
        return sum(1 for t in self.threads.values() if t.is_alive())

    def _run(self, worker: tasks.Worker) -> None:
        failures = 0
        while not self.stop.is_set():
            close_old_connections()
            try:
                worker.run(self.stop)
                failures = 0
            except Exception:
                failures += 1
                logger.exception(
                    "worker_failed node=%s worker=%s attempt=%d",
                    self.node_id,
                    worker.name,
                    failures,
                )
            finally:
                connections.close_all()
            self.stop.wait(min(MAX_BACKOFF_SECONDS, 0.5 * 2 ** min(failures, 10)))
