"""Leases: one holder at a time, on the database clock, with a fencing token."""

import multiprocessing
import queue
import threading
from datetime import timedelta

import pytest
from django.db import connections
from django.test import override_settings

from qcluster import leases
from qcluster.models import LEASE_NAME_MAX_LENGTH, ClusterLease, ClusterNode
from tests.qcluster.conftest import db_now_minus, expire_lease

A, B = leases.as_node("node-a"), leases.as_node("node-b")


def test_acquire_free_lease_returns_fencing_token_and_records_holder(db):
    token = A.try_acquire("job", timedelta(seconds=30))

    assert token == 1
    lease = leases.holder("job")
    assert lease.holder_node_id == "node-a" and lease.version == 1
    row = ClusterLease.objects.get(name="job")
    assert row.transitions == 1 and row.acquired_at is not None


def test_live_lease_is_not_taken_by_another_node(db):
    A.try_acquire("job", 30)

    assert B.try_acquire("job", 30) == 0
    assert leases.holder("job").holder_node_id == "node-a"


def test_holder_extends_its_lease_and_the_token_grows(db):
    first = A.try_acquire("job", 30)
    again = A.try_acquire("job", 30)
    renewed = A.renew("job", 30)

    assert first < again < renewed
    assert ClusterLease.objects.get(name="job").transitions == 1


def test_expired_lease_is_taken_over_and_counts_a_transition(db):
    A.try_acquire("job", 30)
    expire_lease("job")

    token = B.try_acquire("job", 30)

    assert token == 2  # created free (version 0), taken by A (1), then by B (2)
    row = ClusterLease.objects.get(name="job")
    assert (row.holder_node_id, row.version, row.transitions) == ("node-b", 2, 2)


def test_renew_and_release_work_only_for_the_holder(db):
    A.try_acquire("job", 30)

    assert B.renew("job", 30) == 0
    assert B.release("job") is False
    assert leases.holder("job").holder_node_id == "node-a"
    assert A.release("job") is True
    assert leases.holder("job") is None
    assert B.try_acquire("job", 30)


def test_holder_stops_being_leader_within_the_safety_margin(db):
    A.try_acquire("short", timedelta(seconds=1))
    A.try_acquire("long", timedelta(seconds=60))

    with override_settings(QCLUSTER={"LEASE_SAFETY_SECONDS": 2}):
        assert A.is_leader("short") is False
        assert A.is_leader("long") is True
        assert B.is_leader("long") is False


def test_fence_matches_only_the_current_token(db):
    ClusterNode.objects.create(node_id="guarded")
    old = A.try_acquire("job", 30)
    guarded = ClusterNode.objects.filter(node_id="guarded")

    assert guarded.filter(leases.fence("job", old)).update(zone="a") == 1
    expire_lease("job")
    B.try_acquire("job", 30)
    assert guarded.filter(leases.fence("job", old)).update(zone="stale") == 0
    assert ClusterNode.objects.get(node_id="guarded").zone == "a"


def test_release_all_held_by_frees_only_that_nodes_leases(db):
    A.try_acquire("one", 30)
    A.try_acquire("two", 30)
    B.try_acquire("three", 30)

    assert sorted(leases.release_all_held_by("node-a")) == ["one", "two"]
    assert leases.holder("one") is None and leases.holder("two") is None
    assert leases.holder("three").holder_node_id == "node-b"


def test_held_continuously_for_counts_from_the_last_change_of_holder(db):
    A.try_acquire("job", 30)
    ClusterLease.objects.filter(name="job").update(acquired_at=db_now_minus(10))
    A.renew("job", 30)  # a renewal keeps the holder: the time held goes on

    assert A.held_continuously_for("job", timedelta(seconds=9))
    assert not A.held_continuously_for("job", 11)
    assert not B.held_continuously_for("job", 0)

    expire_lease("job")
    B.try_acquire("job", 30)  # a new holder starts from zero
    assert not B.held_continuously_for("job", 5)
    assert not A.held_continuously_for("job", 0)


@pytest.mark.parametrize("again", ["try_acquire", "renew"])
def test_a_lease_of_ones_own_held_again_after_it_expired_counts_from_then(db, again):
    """The lease was free while it had expired: held without a break since the take (or
    renewal) that followed, not since the first take (a ``cluster_runtime --once`` sweeper
    counts its watch from it)."""
    A.try_acquire("job", 30)
    ClusterLease.objects.filter(name="job").update(acquired_at=db_now_minus(600))
    expire_lease("job", seconds_ago=300)
    assert getattr(A, again)("job", 30)
    assert not A.held_continuously_for("job", 60)
    assert A.held_continuously_for("job", 0)


@pytest.mark.parametrize("name", ["", "x" * (LEASE_NAME_MAX_LENGTH + 1)])
def test_empty_or_too_long_lease_name_is_a_value_error(db, name):
    for call in (
        lambda: A.try_acquire(name, 30),
        lambda: A.renew(name, 30),
        lambda: A.release(name),
        lambda: A.is_leader(name),
        lambda: leases.holder(name),
    ):
        with pytest.raises(ValueError, match="lease name"):
            call()


def test_non_positive_ttl_is_a_value_error(db):
    with pytest.raises(ValueError, match="ttl"):
        A.try_acquire("job", timedelta(0))


def test_lease_changes_refuse_to_join_a_callers_transaction(transactional_db):
    from django.db import transaction

    with transaction.atomic(), pytest.raises(RuntimeError):
        A.try_acquire("job", 30)
    # Whatever the answer would have been: a lease another node holds, one this node does not.
    B.try_acquire("held", 30)
    for call in (lambda: A.try_acquire("held", 30), lambda: A.renew("held", 30)):
        with transaction.atomic(), pytest.raises(RuntimeError):
            call()


# --- real concurrency on PostgreSQL ---------------------------------------------------------------

CONTENDERS = 8
ROUNDS = 20
WAIT = 60


def _contend(node_id: str, name: str, barrier, results) -> None:
    """One contender: in each round, race for the lease, then try again while it is live."""
    client = leases.as_node(node_id)
    try:
        for round_no in range(ROUNDS):
            barrier.wait(WAIT)
            first = client.try_acquire(name, timedelta(seconds=60))
            barrier.wait(WAIT)
            second = client.try_acquire(name, timedelta(seconds=60))
            results.put((round_no, node_id, first, second))
            barrier.wait(WAIT)  # the referee checks and frees the lease
            barrier.wait(WAIT)
    finally:
        connections.close_all()


def _referee(name: str, barrier, results) -> None:
    """Run the rounds from the test's side and check every one of them."""
    last_token = 0
    for round_no in range(ROUNDS):
        barrier.wait(WAIT)
        barrier.wait(WAIT)
        barrier.wait(WAIT)
        outcome = [results.get(timeout=WAIT) for _ in range(CONTENDERS)]
        assert {r for r, *_ in outcome} == {round_no}
        winners = [(node, first, second) for _, node, first, second in outcome if first]
        assert len(winners) == 1, f"round {round_no}: winners {winners}"
        winner, first, second = winners[0]
        assert first > last_token, f"round {round_no}: token {first} after {last_token}"
        # While the lease is live, only its holder gets it again.
        assert second == first + 1
        assert [n for _, n, _, s in outcome if s] == [winner]
        row = ClusterLease.objects.get(name=name)
        assert (row.holder_node_id, row.version) == (winner, second)
        assert ClusterLease.objects.filter(name=name).count() == 1
        last_token = second
        loser = next(n for _, n, _, _ in outcome if n != winner)
        assert leases.as_node(loser).release(name) is False
        assert leases.as_node(loser).renew(name, 60) == 0
        if round_no % 2:
            assert leases.as_node(winner).release(name) is True
        else:
            expire_lease(name)  # the next round takes an expired lease over
        barrier.wait(WAIT)


@pytest.mark.services
def test_exactly_one_of_eight_threads_wins_each_round(transactional_db):
    barrier = threading.Barrier(CONTENDERS + 1)
    results: queue.Queue = queue.Queue()
    threads = [
        threading.Thread(target=_contend, args=(f"thread-{i}", "race", barrier, results))
        for i in range(CONTENDERS)
    ]
    for thread in threads:
        thread.start()
    try:
        _referee("race", barrier, results)
    except BaseException:
        barrier.abort()  # a failed round must not leave contenders waiting
        raise
    finally:
        for thread in threads:
            thread.join(WAIT)
    assert ClusterLease.objects.get(name="race").transitions >= ROUNDS


def _contend_in_process(node_id, name, barrier, results) -> None:
    _contend(node_id, name, barrier, results)


@pytest.mark.services
@pytest.mark.slow
def test_exactly_one_of_eight_processes_wins_each_round(transactional_db):
    context = multiprocessing.get_context("fork")
    barrier = context.Barrier(CONTENDERS + 1)
    results = context.Queue()
    connections.close_all()  # each child opens its own connection
    processes = [
        context.Process(target=_contend_in_process, args=(f"proc-{i}", "race", barrier, results))
        for i in range(CONTENDERS)
    ]
    for process in processes:
        process.start()
    try:
        _referee("race", barrier, results)
    except BaseException:
        barrier.abort()
        raise
    finally:
        for process in processes:
            process.join(WAIT)
            if process.is_alive():
                process.kill()
    assert [p.exitcode for p in processes] == [0] * CONTENDERS


@pytest.mark.services
def test_missing_row_is_created_once_when_eight_threads_race_for_it(transactional_db):
    for attempt in range(5):
        name = f"fresh-{attempt}"
        barrier = threading.Barrier(CONTENDERS)
        tokens: dict[str, int] = {}

        def race(node_id: str, name=name, barrier=barrier, tokens=tokens) -> None:
            try:
                barrier.wait(WAIT)
                tokens[node_id] = leases.as_node(node_id).try_acquire(name, 60)
            finally:
                connections.close_all()

        threads = [threading.Thread(target=race, args=(f"t{i}",)) for i in range(CONTENDERS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(WAIT)
        assert len(tokens) == CONTENDERS
        assert sorted(tokens.values()) == [0] * (CONTENDERS - 1) + [1]
        assert ClusterLease.objects.filter(name=name).count() == 1
