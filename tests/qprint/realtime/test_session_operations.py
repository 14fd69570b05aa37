"""The device session's operations and pushed assignments without sockets or a database: the
request frames parsed and answered, push mode asked for, and when a job is pushed."""

from __future__ import annotations

import itertools
import json

import pytest

from qprint.core import gate
from qprint.realtime.frames import (
    OperationRequest,
    ProtocolError,
)
from qprint.realtime.session import DeviceSession
from tests.qprint.realtime.sessions import (
    ready_session,
    session,
    state,
    taken,
)


def test_an_event_frame_is_the_http_body_with_its_type_as_event_type():
    frame = {"type": "event", "request_id": "r1", "job_id": "j", "event_id": "e",
             "event_type": "PRINTED", "claim_id": "c", "occurred_at": "t", "message": "m",
             "detail": {"a": 1}, "unknown": "dropped"}  # fmt: skip
    request = DeviceSession.operation(frame)
    assert (request.operation, request.request_id, request.target) == ("event", "r1", "j")
    assert request.body == {"event_id": "e", "type": "PRINTED", "claim_id": "c",
                            "occurred_at": "t", "message": "m", "detail": {"a": 1}}  # fmt: skip
    result = DeviceSession.operation(
        {"type": "command_result", "request_id": "r2", "command_id": "k", "status": "DONE"}
    )
    assert (result.target, result.body) == ("k", {"status": "DONE"})


@pytest.mark.parametrize(
    "frame",
    [
        {"type": "claim"},
        {"type": "claim", "request_id": 1},
        {"type": "claim", "request_id": "x" * 65},
        {"type": "event", "request_id": "r"},
        {"type": "command_result", "request_id": "r", "status": "DONE"},
    ],
)
def test_a_malformed_operation_frame_is_a_protocol_error(frame):
    with pytest.raises(ProtocolError):
        DeviceSession.operation(frame)


def test_answers_repeat_the_request_id_and_carry_the_http_answer():
    claim = DeviceSession.operation({"type": "claim", "request_id": "a"})
    assert DeviceSession.answer(claim, 204, None) == {"type": "nothing", "request_id": "a"}
    assert DeviceSession.answer(claim, 200, {"job_id": "j"}) == {
        "job_id": "j", "type": "assignment", "request_id": "a"}  # fmt: skip
    assert DeviceSession.refused(claim, 409, "paused", "The device is paused.") == {
        "type": "refused", "request_id": "a", "status": 409, "error": "paused",
        "message": "The device is paused."}  # fmt: skip


def push_state(inline: int | None = 4096, **revisions) -> str:
    frame = {"type": "state", "control_revision": 1, "settings_revision": 1, **revisions}
    if inline is not None:
        frame["push"] = {"inline_max_bytes": inline}
    return json.dumps(frame)


def push_session(inline: int = 4096, cap: int = 262144, row=None) -> tuple[DeviceSession, object]:
    """A session whose device asked for push in its first state frame; the plan of that frame."""
    s = session(inline_cap=cap)
    s.hello(taken(), now=0.0)
    reported = s.receive(push_state(inline), 1.0)
    return s, s.marked_ready(row if row is not None else state(job_queued=False), reported)


@pytest.mark.parametrize(
    ("asked", "cap", "mode"), [(4096, 262144, 4096), (10**9, 262144, 262144), (0, 100, 0)]
)
def test_a_state_frame_asking_for_push_turns_push_mode_on_capped_by_the_server(asked, cap, mode):
    s, _ = push_session(asked, cap)
    assert s.push_inline_max == mode
    assert s.inline(mode) and not s.inline(mode + 1)


@pytest.mark.parametrize(
    "push",
    [
        [],
        {},  # inline_max_bytes is required: no default stands in for it
        {"inline_max_bytes": None},
        {"inline_max_bytes": -1},
        {"inline_max_bytes": True},
        {"inline_max_bytes": "1"},
    ],
)
def test_a_malformed_push_request_is_a_protocol_error(push):
    s = session()
    s.hello(taken(), now=0.0)
    text = json.dumps({"type": "state", "control_revision": 1, "settings_revision": 1,
                       "push": push})  # fmt: skip
    with pytest.raises(ProtocolError, match="push"):
        s.receive(text, 1.0)


def test_without_push_the_device_is_woken_and_nothing_is_pushed():
    s = ready_session()
    plan = s.reconciled(state())
    assert plan.then == [{"type": "wake"}] and not plan.push
    assert s.push_inline_max is None


def test_after_hello_and_state_a_waiting_job_is_pushed_never_woken():
    _, plan = push_session(row=state())
    assert plan.push and plan.then == []


def test_push_mode_never_sends_wake_and_pushes_only_through_an_open_gate():
    """Every combination of the gate's inputs and of what waits, on every kind of reconcile: no
    ``wake`` in push mode, and a push only when a claim would be served."""
    flags = itertools.product([True, False], repeat=8)
    for enabled, live, ready, paused, control_ok, settings_ok, queued, held in flags:
        row = state(
            enabled=enabled,
            connection_live=live,
            connection_ready=ready,
            paused=paused,
            control_applied_revision=1 if control_ok else 0,
            settings_applied_revision=1 if settings_ok else 0,
            job_queued=queued,
            claimed_job_id="j-held" if held else None,
        )
        for reconcile in ("pinged", "reconciled", "marked_ready"):
            s, _ = push_session()
            plan = getattr(s, reconcile)(row)
            assert {"type": "wake"} not in plan.then, row
            if gate.refusal(row) is not None:
                assert not plan.push, row
            elif queued or held:
                assert plan.push, (reconcile, row)


def test_a_pushed_job_is_not_pushed_again_on_the_same_connection():
    s, _ = push_session()
    frame = s.pushed({"job_id": "j-1", "claim_id": "c-1", "size": 3}, b"abc")
    assert frame == {"job_id": "j-1", "claim_id": "c-1", "size": 3, "type": "assignment",
                     "pushed": True, "document_base64": "YWJj"}  # fmt: skip
    assert not s.pinged(state(claimed_job_id="j-1")).push
    assert not s.reconciled(state(claimed_job_id="j-1")).push


def test_a_held_job_is_pushed_again_on_a_new_connection():
    """The replay: the job pushed before the reconnect is still CLAIMED; the new connection's
    session pushes it (the claim function answers the same claim_id)."""
    _, plan = push_session(row=state(job_queued=False, claimed_job_id="j-1"))
    assert plan.push


def test_a_document_over_the_limit_is_not_inline():
    s, _ = push_session(inline=2)
    assert not s.inline(3)
    frame = s.pushed({"job_id": "j-1", "size": 3, "document_url": "/d"}, None)
    assert "document_base64" not in frame and frame["document_url"] == "/d"


def event(job: str, kind: str) -> OperationRequest:
    return DeviceSession.operation({"type": "event", "request_id": "r", "job_id": job,
                                    "event_type": kind})  # fmt: skip


@pytest.mark.parametrize(
    ("kind", "job", "status", "push"),
    [
        ("RECEIVED", "j-1", "RECEIVED", True),
        ("FAILED", "j-1", "FAILED", True),
        ("PRINTED", "j-1", "PRINTED", True),
        ("SPOOLED", "j-1", "SPOOLED", False),
        ("PROGRESS", "j-1", "CLAIMED", False),
        ("RECEIVED", "j-0", "RECEIVED", False),  # not the job last pushed: it was pushed before
    ],
)
def test_the_next_job_is_pushed_once_the_held_one_left_claimed(kind, job, status, push):
    s, _ = push_session()
    s.pushed({"job_id": "j-1", "size": 1}, None)
    assert s.push_after(event(job, kind), {"job_status": status}) is push


def test_without_push_mode_an_event_pushes_nothing():
    s = ready_session()
    s.pushed_job = "j-1"
    assert not s.push_after(event("j-1", "RECEIVED"), {"job_status": "RECEIVED"})


def test_only_the_event_that_released_the_pushed_job_pushes():
    """RECEIVED of the job last pushed pushes (once); its PRINTED afterwards pushes nothing: the
    claim after RECEIVED handed out the next job, or there was none to hand out."""
    s, _ = push_session()
    s.pushed({"job_id": "j-1", "size": 1}, None)
    assert s.push_after(event("j-1", "RECEIVED"), {"job_status": "RECEIVED"})
    assert not s.push_after(event("j-1", "PRINTED"), {"job_status": "PRINTED"})
    assert s.pushed_job is None
    assert s.reconciled(state(job_queued=True)).push  # a job submitted later is pushed


def test_a_release_with_nothing_queued_claims_nothing_and_a_later_job_is_pushed():
    """The event's own statement saw no other job of the device: no claim follows RECEIVED (it
    would hand out nothing); the job is released all the same, so the wakeup of a job submitted
    later pushes it. Not known (None, e.g. SQLite): the claim is made to find out."""
    s, _ = push_session()
    s.pushed({"job_id": "j-1", "size": 1}, None)
    assert not s.push_after(event("j-1", "RECEIVED"), {"job_status": "RECEIVED"}, queued=False)
    assert s.pushed_job is None
    assert s.reconciled(state(job_queued=True)).push
    s.pushed({"job_id": "j-2", "size": 1}, None)
    assert s.push_after(event("j-2", "RECEIVED"), {"job_status": "RECEIVED"}, queued=None)
