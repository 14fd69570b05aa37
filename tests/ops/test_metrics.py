"""The process's instruments, in-process: what they count and when."""

from __future__ import annotations

import pytest
from django.db import transaction

from qprint import api
from qprint.metrics import instruments


def sample(name: str, **labels: str) -> float:
    return instruments.PROCESS.get_sample_value(name, labels) or 0.0


class Rollback(Exception):
    pass


def test_a_finished_job_is_counted_after_commit_only(transactional_db):
    api.create_device("acme", "desk-finish")
    kept, _ = api.submit_job("acme", "desk-finish", b"%PDF-1.4", "application/pdf")
    undone, _ = api.submit_job("acme", "desk-finish", b"%PDF-1.4 2", "application/pdf")
    before = sample("qprint_jobs_finished_total", status="CANCELLED")
    printed = sample("qprint_job_submit_to_printed_seconds_count")

    with pytest.raises(Rollback), transaction.atomic():
        api.cancel_job(undone)
        raise Rollback
    assert sample("qprint_jobs_finished_total", status="CANCELLED") == before

    api.cancel_job(kept)
    assert sample("qprint_jobs_finished_total", status="CANCELLED") == before + 1
    # Not PRINTED: the submit -> PRINTED histogram did not move.
    assert sample("qprint_job_submit_to_printed_seconds_count") == printed


def test_claims_and_events_refused_before_authentication_are_counted(client, db):
    http = {"path": "http"}
    claims = sample("qprint_claims_total", status="401", answer="unauthorized", **http)
    timed = sample("qprint_claim_duration_seconds_count", **http)
    assert client.post("/qprint/api/v1/device/claim").status_code == 401
    assert sample("qprint_claims_total", status="401", answer="unauthorized", **http) == claims + 1
    assert sample("qprint_claim_duration_seconds_count", **http) == timed + 1

    events = sample("qprint_events_total", status="401", answer="unauthorized", **http)
    path = "/qprint/api/v1/device/jobs/00000000-0000-0000-0000-000000000000/events"
    assert client.post(path, content_type="application/json").status_code == 401
    assert sample("qprint_events_total", status="401", answer="unauthorized", **http) == events + 1


def test_a_wakeup_is_timed_only_when_it_sent_a_wake_frame():
    import time

    delivered = sample("qprint_wakeups_delivered_total")
    timed = sample("qprint_wake_latency_seconds_count")
    fast = sample("qprint_wake_latency_seconds_bucket", le="0.1")
    slower = sample("qprint_wake_latency_seconds_bucket", le="30.0")
    instruments.wakeup_handled({"type": "qprint.wake", "sent_at": time.time()}, woke=False)
    assert sample("qprint_wakeups_delivered_total") == delivered + 1
    assert sample("qprint_wake_latency_seconds_count") == timed
    instruments.wakeup_handled({"type": "qprint.wake", "sent_at": time.time() - 0.2}, woke=True)
    assert sample("qprint_wake_latency_seconds_count") == timed + 1
    # 0.2 s ago: above the 0.1 s bucket, within the 30 s one.
    assert sample("qprint_wake_latency_seconds_bucket", le="0.1") == fast
    assert sample("qprint_wake_latency_seconds_bucket", le="30.0") == slower + 1


def test_socket_answers_with_the_same_labels_count_each_time_and_apart_by_label():
    """The instruments keep each labelled child after its first answer (``_labelled``): later
    answers still reach the exposition, each under its own labels."""
    socket = {"path": "socket"}
    created = sample("qprint_events_total", status="201", answer="created", **socket)
    stale = sample("qprint_events_total", status="409", answer="stale_claim", **socket)
    timed = sample("qprint_event_duration_seconds_count", **socket)
    for _ in range(3):
        instruments.socket_operation_answered("event", 0.0, 201, "")
    instruments.socket_operation_answered("event", 0.0, 409, "stale_claim")
    assert sample("qprint_events_total", status="201", answer="created", **socket) == created + 3
    assert sample("qprint_events_total", status="409", answer="stale_claim", **socket) == stale + 1
    assert sample("qprint_event_duration_seconds_count", **socket) == timed + 4
    assert instruments._labelled(instruments.EVENTS, "201", "created", "socket") is (
        instruments.EVENTS.labels("201", "created", "socket")
    )


def test_cluster_runtime_refuses_a_bad_metrics_port():
    from django.core.management import CommandError, call_command

    with pytest.raises(CommandError, match="--metrics-port must be between 1 and 65535, not 0"):
        call_command("cluster_runtime", "--metrics-port", "0")
