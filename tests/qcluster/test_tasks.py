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
