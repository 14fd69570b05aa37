"""The job state machine as data: forward only, final is final, skipping forward allowed."""

import itertools

import pytest

from qprint.core.states import FINAL, RANK, JobStatus, can_move, is_final

ALL = list(JobStatus)


@pytest.mark.parametrize(("current", "target"), list(itertools.product(ALL, ALL)))
def test_a_job_never_moves_backwards_or_sideways_at_the_same_rank(current, target):
    if RANK[target] <= RANK[current]:
        assert not can_move(current, target)


@pytest.mark.parametrize(("final", "target"), list(itertools.product(sorted(FINAL), ALL)))
def test_a_final_job_never_changes(final, target):
    assert is_final(final)
    assert not can_move(final, target)


@pytest.mark.parametrize(
    ("current", "target"),
    [
        (JobStatus.QUEUED, JobStatus.CLAIMED),
        (JobStatus.QUEUED, JobStatus.CANCELLED),
        (JobStatus.QUEUED, JobStatus.EXPIRED),
        (JobStatus.CLAIMED, JobStatus.RECEIVED),
        (JobStatus.CLAIMED, JobStatus.FAILED),  # the download failed: skip forward
        (JobStatus.CLAIMED, JobStatus.CANCELLED),
        (JobStatus.CLAIMED, JobStatus.EXPIRED),
        (JobStatus.RECEIVED, JobStatus.SPOOLED),
        (JobStatus.RECEIVED, JobStatus.OUTCOME_UNKNOWN),
        (JobStatus.RECEIVED, JobStatus.CANCELLED),
        (JobStatus.SPOOLED, JobStatus.PRINTED),
        (JobStatus.SPOOLED, JobStatus.FAILED),
    ],
)
def test_the_moves_of_the_spec_are_allowed(current, target):
    assert can_move(current, target)


@pytest.mark.parametrize(
    ("current", "target"),
    [
        (JobStatus.QUEUED, JobStatus.RECEIVED),  # only a claim hands a job out
        (JobStatus.QUEUED, JobStatus.PRINTED),
        (JobStatus.RECEIVED, JobStatus.EXPIRED),  # expiry stops once the device has the job
        (JobStatus.SPOOLED, JobStatus.EXPIRED),
    ],
)
def test_moves_the_spec_does_not_draw_are_refused(current, target):
    assert not can_move(current, target)
