"""Helpers and fixtures of the qprint domain tests (models, claim, events, Python API).

A module that wants the wakeups recorded declares its own fixture on top of
:func:`recording_wakeups` (``yield from recording_wakeups()``).
"""

import uuid
from contextlib import contextmanager
from datetime import UTC, datetime

from django.db import connection

from qprint import api
from qprint.domain import wakeups
from qprint.domain.wakeups import RecordingPublisher
from qprint.models import PrintJob
from tests.qprint.factories import connect, make_device  # noqa: F401  (re-exported)

PDF = b"%PDF-1.4\n% a test document\n"


def sessions_waiting_on_a_lock(query_like: str) -> int:
    """How many sessions of the test's database wait on a lock in a statement whose text
    matches ``query_like`` (a SQL ``LIKE`` pattern), as ``pg_stat_activity`` says: how a test
    knows that the statement it raced is waiting, not merely started."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND wait_event_type = 'Lock' AND query LIKE %s",
            [query_like],
        )
        return cursor.fetchone()[0]


def waited_for_a_lock(hold, wait, waiting_like: str, what: str):
    """What ``wait()`` returned (or raised) when it ran while ``hold()``'s transaction was open.

    ``hold()`` runs in a transaction on a thread of its own, which stays open until ``wait()``,
    on a second thread, waits on a lock in a statement whose text matches ``waiting_like``
    (:func:`sessions_waiting_on_a_lock`; ``what`` names that wait in a timeout's message); then
    the first commits and the second goes on. How a test makes a statement wait for another's
    row lock, with no sleep. PostgreSQL only. Each thread closes its connection."""
    import threading

    from django.db import transaction

    from tests.waiting import wait_until

    holding, commit = threading.Event(), threading.Event()
    answers: dict = {}

    def first() -> None:
        try:
            with transaction.atomic():
                hold()
                holding.set()
                commit.wait(30)
        finally:
            connection.close()

    def second() -> None:
        try:
            answers["waited"] = wait()
        except Exception as exc:  # the caller asserts on it
            answers["waited"] = exc
        finally:
            connection.close()

    holder = threading.Thread(target=first)
    holder.start()
    waiter = threading.Thread(target=second)
    try:
        assert holding.wait(30), "the holding transaction did not run"
        waiter.start()
        wait_until(lambda: sessions_waiting_on_a_lock(waiting_like) == 1, 30, message=what)
    finally:
        commit.set()
        holder.join(30)
        if waiter.ident is not None:  # started
            waiter.join(30)
    return answers["waited"]


@contextmanager
def cursors_seen():
    """The cursor each statement of the block ran on, in order (Django's execute wrappers see
    ``qprint.core.prepared.fetch``'s statements as any other)."""
    seen = []

    def wrapper(execute, sql, params, many, context):
        seen.append(context["cursor"])
        return execute(sql, params, many, context)

    with connection.execute_wrapper(wrapper):
        yield seen


def recording_wakeups():
    """Record the wakeups published meanwhile, as ``(tenant, device_id, reason)`` tuples."""
    publisher = RecordingPublisher()
    previous = wakeups.set_publisher(publisher)
    yield publisher.recorded
    wakeups.set_publisher(previous)


def submit(device, content: bytes = PDF, **fields) -> PrintJob:
    job, created = api.submit_job(
        device.tenant, device.name, content, fields.pop("content_type", "application/pdf"), **fields
    )
    assert created
    return job


def event(job_or_claim, type: str, **fields) -> dict:
    """A device event body for the job's current claim (or for the claim id given)."""
    claim_id = getattr(job_or_claim, "claim_id", job_or_claim)
    return {
        "event_id": str(fields.pop("event_id", uuid.uuid4())),
        "type": type,
        "claim_id": str(claim_id),
        "occurred_at": fields.pop("occurred_at", datetime.now(UTC).isoformat()),
        **fields,
    }


def run_concurrently(count: int, func, timeout: float = 60) -> list:
    """Run ``func(i)`` in ``count`` threads released together by a barrier.

    Returns ``("ok", value)`` or ``("error", exception)`` per thread, in thread order. Each thread
    has its own database connection (Django's are per thread) and closes it at the end.
    """
    import threading

    from django.db import connection

    barrier = threading.Barrier(count)
    results: list = [None] * count

    def worker(i: int) -> None:
        try:
            barrier.wait(timeout=timeout)
            results[i] = ("ok", func(i))
        except BaseException as exc:  # reported to the test, which asserts on it
            results[i] = ("error", exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout)
    assert not any(t.is_alive() for t in threads), "a racing thread did not finish"
    return results


def values(results: list) -> list:
    """The values of ``run_concurrently`` results, failing on the first error."""
    errors = [r[1] for r in results if r[0] == "error"]
    if errors:
        raise errors[0]
    return [r[1] for r in results]


def documents_in_a_storage(settings, directory) -> None:
    """Keep documents as files of a Django storage in ``directory`` (``StorageDocuments``)."""
    settings.STORAGES = {
        **settings.STORAGES,
        "print-documents": {
            "BACKEND": "django.core.files.storage.FileSystemStorage",
            "OPTIONS": {"location": str(directory)},
        },
    }
    settings.QPRINT = {
        "DOCUMENT_BACKEND": "qprint.documents.storage.StorageDocuments",
        "DOCUMENT_STORAGE": "print-documents",
    }


def connect_read(token_hash: str) -> tuple[str, list]:
    """The read of a socket's upgrade (the gate of ``connection.take_presented``: the device by
    its token, with its active jobs) for one token, as ``generic_plan_buffers`` takes it."""
    from qprint.domain import connection as connections

    gate, params = connections._TAKE_GATE.statement()
    return f"WITH presented AS (SELECT %s::varchar AS digest) {gate}", [token_hash, *params]
