"""The device session without sockets or a database: every decision of wire v1's server side."""

from __future__ import annotations

import itertools
import json
import uuid
from dataclasses import replace

import pytest

from qprint.core import gate
from qprint.core.wire import (
    CLOSE_DISABLED,
    CLOSE_DRAINING,
    CLOSE_HEARTBEAT_MISSED,
    CLOSE_PROTOCOL_ERROR,
    CLOSE_REPLACED,
)
from qprint.domain.commands import Delivery
from qprint.domain.connection import DeviceState, Taken
from qprint.realtime.frames import (
    OperationRequest,
    Ping,
    PrintersReported,
    ProtocolError,
    StateReported,
)
from qprint.realtime.session import DeviceSession

TOKEN_HASH = "a" * 64
CONNECTION = uuid.uuid4()


def session(
    heartbeat: float = 20, max_frame_bytes: int = 1024, inline_cap: int = 262144
) -> DeviceSession:
    return DeviceSession(
        device_id=7,
        token_hash=TOKEN_HASH,
        connection_id=CONNECTION,
        node="node-a",
        heartbeat_seconds=heartbeat,
        max_frame_bytes=max_frame_bytes,
        inline_cap=inline_cap,
    )


def taken(control: int = 1, settings: int = 1, paused: bool = False) -> Taken:
    return Taken(
        enabled=True,
        paused=paused,
        control_revision=control,
        settings_revision=settings,
        settings={"tray": 1},
    )


def state(**changes) -> DeviceState:
    """A row whose gate is open, with a job waiting, unless ``changes`` say otherwise."""
    base = DeviceState(
        enabled=True,
        connection_live=True,
        connection_ready=True,
        paused=False,
        control_revision=1,
        control_applied_revision=1,
        settings_revision=1,
        settings_applied_revision=1,
        token_hash=TOKEN_HASH,
        command_pending=False,
        claimed_job_id=None,
        job_queued=True,
    )
    return replace(base, **changes)


def ready_session(**kwargs) -> DeviceSession:
    s = session(**kwargs)
    s.hello(taken(), now=0.0)
    s.marked_ready(state(job_queued=False))
    return s


def test_hello_tells_the_row_taken_and_remembers_what_it_told():
    s = session(heartbeat=20)
    hello = s.hello(taken(control=3, settings=5, paused=True), now=0.0)
    assert hello == {
        "type": "hello",
        "connection_id": str(CONNECTION),
        "node": "node-a",
        "heartbeat_seconds": 20,
        "control": {"revision": 3, "paused": True},
        "settings": {"revision": 5, "values": {"tray": 1}},
        "operations": ["claim", "event", "command_result", "push"],
        "active_jobs": [],
    }
    assert (s.sent_control, s.sent_settings_revision) == ((3, True), 5)


def test_hello_lists_the_active_jobs_the_row_taken_carries():
    t = replace(taken(), active_jobs=(("j1", "c1", "RECEIVED"), ("j2", "c2", "SPOOLED")))
    assert session().hello(t, now=0.0)["active_jobs"] == [
        {"job_id": "j1", "claim_id": "c1", "status": "RECEIVED"},
        {"job_id": "j2", "claim_id": "c2", "status": "SPOOLED"},
    ]


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (None, "JSON text"),
        ("not json", "not JSON"),
        ("[1, 2]", '"type"'),
        ('{"type": 5}', '"type"'),
        ('{"type": "hello"}', "unknown frame type"),
        ('{"type": "ping"}', "first frame must be state"),
        (json.dumps({"type": "state", "pad": "x" * 2000}), "larger than 1024 bytes"),
    ],
)
def test_a_frame_the_device_must_not_send_is_a_protocol_error(text, problem):
    s = session()
    s.hello(taken(), now=0.0)
    with pytest.raises(ProtocolError, match=problem):
        s.receive(text, now=1.0)


def test_a_protocol_error_sends_an_error_frame_then_closes_4400():
    frame, close = session().protocol_error(ProtocolError("bad"))
    assert frame == {"type": "error", "code": "protocol_error", "message": "bad"}
    assert close.code == CLOSE_PROTOCOL_ERROR and close.clear_row


@pytest.mark.parametrize(
    "frame",
    [
        {"type": "state", "control_revision": 2, "settings_revision": 1},
        {"type": "state", "control_revision": 1, "settings_revision": 2},
        {"type": "state", "control_revision": -1, "settings_revision": 1},
        {"type": "state", "control_revision": True, "settings_revision": 1},
        {"type": "state", "settings_revision": 1},
    ],
)
def test_applied_revisions_must_be_ones_the_server_sent(frame):
    s = session()
    s.hello(taken(), now=0.0)
    with pytest.raises(ProtocolError):
        s.applied_revisions(frame)


def test_first_state_makes_ready_redelivers_commands_and_wakes_for_a_waiting_job():
    s = session()
    s.hello(taken(), now=0.0)
    plan = s.marked_ready(state())
    assert s.ready
    assert (plan.deliver_commands, plan.redeliver_commands) == (True, True)
    assert plan.then == [{"type": "wake"}]
    assert plan.close is None


def test_an_idle_ping_tells_nothing():
    plan = ready_session().pinged(state(job_queued=False))
    assert (plan.frames, plan.then, plan.read_settings, plan.deliver_commands) == (
        [],
        [],
        False,
        False,
    )


def test_a_newer_control_revision_is_sent_once_and_never_backwards():
    s = ready_session()
    plan = s.reconciled(state(control_revision=2, paused=True, job_queued=False))
    assert plan.frames == [{"type": "control", "revision": 2, "paused": True}]
    assert s.reconciled(state(control_revision=2, paused=True)).frames == []
    assert s.reconciled(state(control_revision=1, paused=False)).frames == []


def test_newer_settings_are_read_then_sent():
    s = ready_session()
    plan = s.pinged(state(settings_revision=2, job_queued=False))
    assert plan.read_settings
    assert s.settings_frame(2, {"tray": 3}) == {
        "type": "settings",
        "revision": 2,
        "values": {"tray": 3},
    }
    assert not s.pinged(state(settings_revision=2, job_queued=False)).read_settings


def test_pending_commands_are_delivered_and_framed():
    s = ready_session()
    assert s.pinged(state(command_pending=True, job_queued=False)).deliver_commands
    frames = s.command_frames([Delivery("c-1", "CANCEL_JOB", {"job_id": "j"})])
    assert frames == [
        {
            "type": "command",
            "command_id": "c-1",
            "command_type": "CANCEL_JOB",
            "payload": {"job_id": "j"},
        }
    ]


@pytest.mark.parametrize(
    "row", [state(enabled=False), state(token_hash="b" * 64)], ids=["disabled", "token_rotated"]
)
def test_a_disabled_device_or_a_rotated_token_closes_4001(row):
    plan = ready_session().pinged(row)
    assert plan.close is not None and plan.close.code == CLOSE_DISABLED


def test_the_token_hash_is_compared_in_constant_time(monkeypatch):
    from qprint.realtime import session as module

    compared = []
    real = module.hmac.compare_digest
    monkeypatch.setattr(
        module.hmac, "compare_digest", lambda a, b: compared.append((a, b)) or real(a, b)
    )
    s = ready_session()
    compared.clear()
    assert s.pinged(state(token_hash="b" * 64)).close.code == CLOSE_DISABLED
    assert compared == [("b" * 64, TOKEN_HASH)]


def test_a_claimed_job_held_from_before_is_announced_once():
    s = ready_session()
    assert s.pinged(state(job_queued=False, claimed_job_id="j-1")).then == [{"type": "wake"}]
    assert s.pinged(state(job_queued=False, claimed_job_id="j-1")).then == []


def test_wake_is_sent_only_when_the_claim_gate_is_open():
    """Every combination of the gate's inputs and of what waits: a ``wake`` never goes out for a
    row on which a claim would be refused, and always goes out when asked with work waiting."""
    flags = itertools.product([True, False], repeat=8)
    for enabled, live, ready, paused, control_ok, settings_ok, queued, asked in flags:
        row = state(
            enabled=enabled,
            connection_live=live,
            connection_ready=ready,
            paused=paused,
            control_applied_revision=1 if control_ok else 0,
            settings_applied_revision=1 if settings_ok else 0,
            job_queued=queued,
        )
        s = ready_session()
        plan = s.plan(row, wake=asked)
        woke = {"type": "wake"} in plan.then
        if gate.refusal(row) is not None:
            assert not woke, row
        elif queued:
            assert woke, row


def test_nothing_is_woken_before_the_device_reported_its_state():
    s = session()
    s.hello(taken(), now=0.0)
    assert s.reconciled(state()).then == []


def test_replaced_closes_4000_unless_it_names_this_connection():
    s = ready_session()
    assert s.replaced({"connection_id": str(CONNECTION)}) is None
    close = s.replaced({"connection_id": str(uuid.uuid4())})
    assert close.code == CLOSE_REPLACED and not close.clear_row
    assert s.draining().code == CLOSE_DRAINING


def test_silence_of_three_heartbeats_closes_4408_and_a_frame_resets_the_clock():
    s = session(heartbeat=10)
    s.hello(taken(), now=100.0)
    assert s.heartbeat_check(now=110.0) == pytest.approx(20.0)
    s.receive(json.dumps({"type": "state", "control_revision": 1, "settings_revision": 1}), 125.0)
    assert s.heartbeat_check(now=150.0) == pytest.approx(5.0)
    close = s.heartbeat_check(now=155.0)
    assert close.code == CLOSE_HEARTBEAT_MISSED


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


def test_frames_are_typed_events():
    s = ready_session()
    state_text = json.dumps({"type": "state", "control_revision": 1, "settings_revision": 1})
    assert s.receive(state_text, 1.0) == StateReported(1, 1, None)
    assert s.receive('{"type": "ping"}', 1.0) == Ping()
    assert s.receive('{"type": "printers", "printers": []}', 1.0) == PrintersReported([])
    claim = s.receive('{"type": "claim", "request_id": "r"}', 1.0)
    assert claim == OperationRequest("claim", "r")


def test_the_decoder_handed_in_judges_the_json():
    def refuse(text):
        raise ValueError("nested too deeply")

    s = DeviceSession(device_id=7, token_hash=TOKEN_HASH, connection_id=CONNECTION, node="n",
                      heartbeat_seconds=20, max_frame_bytes=1024, decode=refuse)  # fmt: skip
    with pytest.raises(ProtocolError, match="nested too deeply"):
        s.receive("{}", 1.0)


# -- pushed assignments -------------------------------------------------------------------------


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
    "push", [[], {"inline_max_bytes": -1}, {"inline_max_bytes": True}, {"inline_max_bytes": "1"}]
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
