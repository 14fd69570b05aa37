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
from qprint.realtime.frames import (
    OperationRequest,
    Ping,
    Plan,
    PrintersReported,
    ProtocolError,
    StateReported,
)
from qprint.realtime.session import DeviceSession
from tests.qprint.realtime.sessions import (
    CONNECTION,
    TOKEN_HASH,
    ready_session,
    session,
    state,
    taken,
)


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
    plan = s.marked_ready(state(command_open=True))
    assert s.ready
    assert (plan.deliver_commands, plan.redeliver_commands) == (True, True)
    assert plan.then == [{"type": "wake"}]
    assert plan.close is None


def test_first_state_with_no_open_command_hands_out_none():
    s = session()
    s.hello(taken(), now=0.0)
    plan = s.marked_ready(state(command_open=False))
    assert s.ready and not plan.deliver_commands
    assert plan.then == [{"type": "wake"}]


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
    assert compared == [(("b" * 64).encode(), TOKEN_HASH.encode())]  # as bytes: any text compares


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


def test_a_wakeup_that_says_what_was_queued_is_answered_without_a_read():
    """Not in push mode: a release with nothing else queued wakes nothing, a queued job wakes the
    device when the gate was open for the last row read; any other wakeup is read (None)."""
    s = ready_session()
    s.pinged(state(job_queued=False))
    assert s.woken(None) is None
    assert s.woken(False) == Plan()
    assert s.woken(True) == Plan(then=[{"type": "wake"}])


def test_a_queued_job_is_read_for_when_the_gate_was_closed_at_the_last_read():
    """The gate is what the last row said, whatever closed it; the row is read again rather than
    the device woken for a claim that row would refuse."""
    closed = [
        {"paused": True},
        {"control_applied_revision": 0},
        {"settings_applied_revision": 0},
        {"connection_live": False},
    ]
    for change in closed:
        s = ready_session()
        s.pinged(state(job_queued=False, **change))
        assert s.woken(True) is None, change
        assert s.woken(False) == Plan(), change
        s.pinged(state(job_queued=False))  # opened again
        assert s.woken(True) == Plan(then=[{"type": "wake"}]), change


def test_a_pushing_session_reads_for_every_wakeup():
    """A job committed while its held job's release was recorded elsewhere may have had its own
    wakeup read while that job still held the device: the release's wakeup must be read."""
    s = ready_session()
    s.marked_ready(state(job_queued=False), StateReported(1, 1, 4096))
    assert [s.woken(queued) for queued in (None, False, True)] == [None, None, None]


def test_before_its_state_a_session_answers_no_wakeup():
    s = session()
    s.hello(taken(), now=0.0)
    assert [s.woken(queued) for queued in (None, False, True)] == [Plan(), Plan(), Plan()]


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
