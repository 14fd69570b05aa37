"""Registering singleton tasks (``qcluster.tasks.register``)."""

from datetime import timedelta

import pytest

from qcluster import tasks


def test_singleton_task_period_may_be_given_in_seconds():
    task = tasks.register("probe-seconds", 45, lambda: None)
    try:
        assert task.every == timedelta(seconds=45)
        assert task.lease_name == "task:probe-seconds"
        with pytest.raises(ValueError):
            tasks.register("probe-seconds", 0, lambda: None)
    finally:
        tasks._registry.pop("probe-seconds", None)


@pytest.mark.django_db(transaction=True)
def test_a_worker_runs_on_every_node_and_stops_when_its_node_stops(monkeypatch):
    """Unlike a singleton task, a worker holds no lease: each runtime runs its own."""
    import signal
    import threading

    from qcluster.identity import read_identity
    from qcluster.runtime import ClusterRuntime
    from tests.waiting import wait_until

    monkeypatch.setattr(tasks, "_registry", {})
    monkeypatch.setattr(tasks, "_workers", {})
    running: list[threading.Event] = []

    def work(stop: threading.Event) -> None:
        running.append(stop)
        stop.wait()

    tasks.register_worker("probe-worker", work)
    runtimes = [ClusterRuntime(read_identity(name)) for name in ("a", "b")]
    codes: list[int] = []
    threads = [threading.Thread(target=lambda r=r: codes.append(r.run())) for r in runtimes]
    for thread in threads:
        thread.start()
    wait_until(lambda: len(running) == 2, 20, message="the worker running on both nodes")
    assert not any(stop.is_set() for stop in running)
    for runtime in runtimes:
        runtime.stop_signal = signal.SIGTERM  # what the signal handler does
    for thread in threads:
        thread.join(30)
    assert codes == [0, 0]
    assert all(stop.is_set() for stop in running)
    assert not any(t.is_alive() for r in runtimes for t in r.workers.threads.values())
