"""What ``cluster_runtime`` runs for other apps.

- **Singleton periodic tasks**: ``cluster_runtime`` runs each one only on the node that holds the
  lease ``task:<name>``.
- **Workers**: long-running functions run on every node while it is UP, stopped on drain.

    from qcluster import tasks
    tasks.register("qprint.expire-jobs", timedelta(seconds=30), expire_jobs)
    tasks.register_worker("qprint.webhooks", send_webhooks)  # send_webhooks(stop: Event)
"""

import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta


@dataclass(frozen=True)
class SingletonTask:
    name: str
    every: timedelta
    func: Callable[[], object]

    @property
    def lease_name(self) -> str:
        return f"task:{self.name}"


_registry: dict[str, SingletonTask] = {}


def register(name: str, every: timedelta | float, func: Callable[[], object]) -> SingletonTask:
    """Register ``func`` to run every ``every`` (a timedelta or seconds) on one node of the
    cluster at a time.

    Call it from ``AppConfig.ready()``. ``func()`` runs in the ``cluster_runtime`` process of the
    node holding the lease ``task:<name>``, in the runtime's task pool (so a long run does not
    delay the heartbeat), and only while that node is UP; an exception is logged (``task_failed``)
    and the next run comes at the next period. Registering the same name again replaces the task
    (so a reloaded module does not register twice). Raises ``ValueError`` for an empty name or a
    period that is not positive.
    """
    if not name:
        raise ValueError("A task needs a name.")
    if not isinstance(every, timedelta):
        every = timedelta(seconds=every)
    if every.total_seconds() <= 0:
        raise ValueError(f"Task {name!r}: 'every' must be positive, got {every}.")
    task = SingletonTask(name=name, every=every, func=func)
    _registry[name] = task
    return task


def registered() -> list[SingletonTask]:
    """The registered tasks, by name."""
    return [_registry[name] for name in sorted(_registry)]


@dataclass(frozen=True)
class Worker:
    """A long-running function that ``cluster_runtime`` runs on **every** node while it is UP.

    ``run(stop)`` works until ``stop`` (a :class:`threading.Event`) is set, then returns soon (the
    runtime waits for it within the drain grace). It runs on a thread of its own; when it raises or
    returns while the node is UP it is started again after a pause. Unlike a singleton task it
    holds no lease: a worker must share its work with the other nodes' workers by itself (for
    example with ``SELECT ... FOR UPDATE SKIP LOCKED``).
    """

    name: str
    run: Callable[[threading.Event], object]


_workers: dict[str, Worker] = {}


def register_worker(name: str, run: Callable[[threading.Event], object]) -> Worker:
    """Register ``run`` to run on every node (call it from ``AppConfig.ready()``; registering
    the same name again replaces it)."""
    if not name:
        raise ValueError("A worker needs a name.")
    worker = Worker(name=name, run=run)
    _workers[name] = worker
    return worker


def registered_workers() -> list[Worker]:
    """The registered workers, by name."""
    return [_workers[name] for name in sorted(_workers)]
