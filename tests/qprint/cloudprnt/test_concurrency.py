"""CloudPRNT requests racing each other on real PostgreSQL, from threads with their own database
connections: a job is received once and confirmed once however many requests arrive together."""

import threading

import pytest
from django.db import connection
from django.test import Client
from django.urls import reverse

from qprint import api
from qprint.models import PrintJob, PrintJobEvent
from tests.qprint.cloudprnt.simulator import StarPrinter, over_test_client

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]

THREADS = 8


def together(work, count=THREADS):
    """Run ``work(n)`` on ``count`` threads released at once; their results in order."""
    barrier = threading.Barrier(count)
    results: list = [None] * count

    def run(n: int) -> None:
        try:
            barrier.wait()
            results[n] = work(n)
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(n,)) for n in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return results


def printer(token: str) -> StarPrinter:
    return StarPrinter(over_test_client(Client(), reverse("qprint:cloudprnt")), "counter", token)


def test_gets_and_confirmations_racing_record_each_step_once():
    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL")
    _, token = api.create_device("acme", "counter", kind="cloudprnt")
    job, _ = api.submit_job("acme", "counter", b"receipt", "text/plain")
    tokens = set(together(lambda n: printer(token).poll()["jobToken"]))
    assert len(tokens) == 1  # every racing poll was answered the same claim
    claim = tokens.pop()

    bodies = together(lambda n: printer(token).fetch(claim, "text/plain"))
    assert {(b.status, b.body) for b in bodies} == {(200, b"receipt")}
    codes = ["200 OK" if n % 2 else "410 Out of paper" for n in range(THREADS)]
    answers = together(lambda n: printer(token).confirm(claim, codes[n]).json())
    assert sum(a["recorded"] for a in answers) == 1
    final = PrintJob.objects.get(pk=job.pk).status
    assert final in ("PRINTED", "FAILED")
    assert {a["status"] for a in answers} <= {"RECEIVED", final}
    types = list(PrintJobEvent.objects.filter(job_id=job.pk).values_list("type", flat=True))
    assert sorted(types) == sorted(["QUEUED", "CLAIMED", "RECEIVED", final])
