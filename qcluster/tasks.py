"""Singleton periodic tasks: other apps register them, ``cluster_runtime`` runs each one only on
the node that holds the lease ``task:<name>``.

    from qcluster import tasks
    tasks.register("qprint.expire-jobs", timedelta(seconds=30), expire_jobs)
"""

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
