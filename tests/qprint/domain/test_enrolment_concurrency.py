"""Enrolment under real concurrency on PostgreSQL (threads released together by a barrier): the
token is handed out to exactly one of many simultaneous polls, and one code approved at once by
several operators makes exactly one device."""

from __future__ import annotations

import threading

import pytest
from django.db import connection

from qprint.core.errors import EnrolmentRefused, NotFound
from qprint.domain import credentials, enrolment
from qprint.models import Device, Enrolment
from tests.qprint.helpers import waited_for_a_lock

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.services]

THREADS = 8
ROUNDS = 5


def race(work) -> list:
    """Run ``work(i)`` on THREADS threads at once; each answer or exception, in order."""
    barrier = threading.Barrier(THREADS)
    results: list = [None] * THREADS

    def run(i: int) -> None:
        try:
            barrier.wait(10)
            results[i] = work(i)
        except Exception as exc:  # the refusal is the answer
            results[i] = exc
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return results


def test_simultaneous_polls_get_the_token_once():
    if connection.vendor != "postgresql":
        pytest.skip("row locks: PostgreSQL")
    for round_ in range(ROUNDS):
        started = enrolment.start({"hostname": f"h{round_}"}, source="192.0.2.1")
        enrolment.approve(
            started.user_code, source="198.51.100.1", actor="x", tenant="acme", name=f"d{round_}"
        )
        results = race(lambda i, s=started: enrolment.poll(s.device_code, source=f"10.0.0.{i}"))
        grants = [r for r in results if isinstance(r, enrolment.Grant)]
        assert len(grants) == 1, results
        assert all(isinstance(r, EnrolmentRefused) for r in results if r not in grants)
        assert credentials.device_for_token(grants[0].token).name == f"d{round_}"


def test_one_code_approved_by_several_operators_at_once_makes_one_device():
    if connection.vendor != "postgresql":
        pytest.skip("row locks: PostgreSQL")
    for round_ in range(ROUNDS):
        started = enrolment.start({"hostname": f"h{round_}"}, source="192.0.2.1")
        results = race(
            lambda i, s=started, n=round_: enrolment.approve(
                s.user_code,
                source=f"10.1.0.{i}",
                actor=f"op{i}",
                tenant="acme",
                name=f"r{n}-{i}",
            )
        )
        approved = [r for r in results if isinstance(r, Enrolment)]
        assert len(approved) == 1, results
        assert all(isinstance(r, NotFound) for r in results if r not in approved)
        assert Device.objects.filter(name__startswith=f"r{round_}-").count() == 1


def test_a_poll_waiting_on_the_approval_gets_the_new_device_s_token():
    """The agent's poll arrives while the approval's transaction holds the enrolment row: its
    lock waits, and once the approval commits it must see the device the approval made (a
    device read in the locking statement would come from the snapshot taken before the wait,
    and the poll would answer ``access_denied`` as if the device had been deleted)."""
    if connection.vendor != "postgresql":
        pytest.skip("row locks: PostgreSQL")
    started = enrolment.start({"hostname": "h"}, source="192.0.2.1")
    grant = waited_for_a_lock(
        lambda: enrolment.approve(
            started.user_code, source="198.51.100.1", actor="x", tenant="acme", name="late"
        ),
        lambda: enrolment.poll(started.device_code, source="10.0.0.1"),
        "%qprint_enrolment%",
        "the poll waiting on the approval's lock",
    )
    assert isinstance(grant, enrolment.Grant), grant
    assert credentials.device_for_token(grant.token).name == "late"
