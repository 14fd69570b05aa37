"""Operations over the socket (docs/PROTOCOL.md): claim, event and command result as frames give
the same answers as the HTTP API, case by case, through the same domain functions; a malformed
request frame closes 4400, a refused one is answered and the socket stays."""

from __future__ import annotations

import base64
import json
import uuid
from datetime import UTC, datetime
from urllib.parse import urlparse

import pytest
from django.test import AsyncClient

from qprint import api
from qprint.domain import credentials
from qprint.models import Device, PrintJob
from qprint.realtime import bus
from tests.qprint.realtime.conftest import adb, observe_statements

pytestmark = pytest.mark.django_db(transaction=True)


def event_body(claim_id, kind: str, **fields) -> dict:
    return {
        "event_id": str(fields.pop("event_id", uuid.uuid4())),
        "type": kind,
        "claim_id": str(claim_id),
        "occurred_at": fields.pop("occurred_at", datetime.now(UTC).isoformat()),
        **fields,
    }


def as_frame(request_id: str, job_id: str, body: dict) -> dict:
    frame = {k: v for k, v in body.items() if k != "type"}
    return {**frame, "type": "event", "request_id": request_id, "job_id": job_id,
            "event_type": body["type"]}  # fmt: skip


async def answer(s, request_id: str) -> dict:
    """The answer frame of ``request_id`` (wakes, controls and commands before it skipped)."""
    while True:
        frame = await s.receive()
        if frame.get("request_id") == request_id:
            return frame


class Http:
    def __init__(self, token: str):
        self.client = AsyncClient()
        self.headers = {"authorization": f"Bearer {token}"}

    async def claim(self):
        status, body, _ = await self.claim_with_hint()
        return status, body

    async def claim_with_hint(self, **headers):
        """The claim's status, body and ``Qprint-More-Queued`` header (None when absent)."""
        r = await self.client.post(
            "/qprint/api/v1/device/claim", headers={**self.headers, **headers}
        )
        body = json.loads(r.content) if r.content else None
        return r.status_code, body, r.headers.get("Qprint-More-Queued")

    async def event(self, job_id: str, body: dict):
        r = await self.client.post(
            f"/qprint/api/v1/device/jobs/{job_id}/events",
            body,
            content_type="application/json",
            headers=self.headers,
        )
        return r.status_code, json.loads(r.content)

    async def command_result(self, command_id: str, body: dict):
        r = await self.client.post(
            f"/qprint/api/v1/device/commands/{command_id}/result",
            body,
            content_type="application/json",
            headers=self.headers,
        )
        return r.status_code, json.loads(r.content)


def refusal(frame: dict) -> tuple:
    assert frame["type"] == "refused", frame
    return frame["status"], {"error": frame["error"], "message": frame["message"]}


async def claimed_over_the_socket(device_factory, sockets) -> tuple:
    """A device with a job queued, its socket ready, the job claimed over it:
    ``(device, token, socket, assignment frame)``."""
    device, token = await adb(device_factory)
    await adb(api.submit_job, device.tenant, device.name, b"%PDF-1.4 x", "application/pdf")
    s = sockets(token)
    await s.hello_and_ready()
    await s.send({"type": "claim", "request_id": "claim"})
    assignment = await answer(s, "claim")
    assert assignment["type"] == "assignment", assignment
    return device, token, s, assignment


async def test_a_claim_frame_asks_for_its_document_inline_as_the_http_claim_does(
    device_factory, sockets
):
    document = b"%PDF-1.4 x"
    device, token = await adb(device_factory)
    await adb(api.submit_job, device.tenant, device.name, document, "application/pdf")
    s = sockets(token)
    await s.hello_and_ready()
    await s.send({"type": "claim", "request_id": "c", "inline_max_bytes": len(document)})
    frame = await answer(s, "c")
    assert base64.b64decode(frame["document_base64"]) == document
    _, body, _ = await Http(token).claim_with_hint(
        **{"Qprint-Inline-Max-Bytes": str(len(document))}
    )
    assert body["document_base64"] == frame["document_base64"]
    # Asking for less than the document's size: it is downloaded.
    await s.send({"type": "claim", "request_id": "d", "inline_max_bytes": len(document) - 1})
    assert "document_base64" not in await answer(s, "d")
    _, body, _ = await Http(token).claim_with_hint(
        **{"Qprint-Inline-Max-Bytes": str(len(document) - 1)}
    )
    assert "document_base64" not in body


@pytest.mark.parametrize("asked", [-1, 1.5, "10", True, [1]])
async def test_an_inline_limit_that_is_not_a_byte_count_is_refused_as_over_http(
    device_factory, sockets, asked
):
    device, token = await adb(device_factory)
    await adb(api.submit_job, device.tenant, device.name, b"%PDF-1.4 x", "application/pdf")
    s = sockets(token)
    await s.hello_and_ready()
    await s.send({"type": "claim", "request_id": "c", "inline_max_bytes": asked})
    status, error = refusal(await answer(s, "c"))
    assert (status, error) == (
        422,
        {"error": "invalid", "message": "'inline_max_bytes' must be a non-negative integer."},
    )
    # The socket stays, and nothing was claimed.
    assert await adb(lambda: list(PrintJob.objects.values_list("status", flat=True))) == ["QUEUED"]
    await s.send({"type": "claim", "request_id": "d"})
    assert (await answer(s, "d"))["type"] == "assignment"


async def test_hello_offers_the_operations(device_and_token, sockets):
    _, token = device_and_token
    hello = await sockets(token).hello_and_ready()
    assert hello["operations"] == ["claim", "event", "command_result", "push"]


async def test_claim_answers_as_http(device_factory, sockets):
    _, token, _, frame = await claimed_over_the_socket(device_factory, sockets)
    status, body, more = await Http(token).claim_with_hint()  # the replay of the same assignment
    assert status == 200, body
    # Nothing waits behind the job: the frame says it as the HTTP answer's header does.
    assert (frame["more_queued"], more) == (False, "false")
    got = {k: v for k, v in frame.items() if k not in ("type", "request_id", "more_queued")}
    assert {k: v for k, v in got.items() if k != "document_url"} == {
        k: v for k, v in body.items() if k != "document_url"
    }
    # Over the socket the URL is relative to qprint's mount: the agent resolves it against its own
    # base URL (the socket's scope says nothing trustworthy of the public scheme and host).
    assert got["document_url"] == f"api/v1/device/jobs/{body['job_id']}/document"
    assert urlparse(body["document_url"]).path == "/qprint/" + got["document_url"]

    _, idle_token = await adb(device_factory)
    s2 = sockets(idle_token)
    await s2.hello_and_ready()
    await s2.send({"type": "claim", "request_id": "c2"})
    assert await answer(s2, "c2") == {"type": "nothing", "request_id": "c2"}
    assert await Http(idle_token).claim() == (204, None)


def _pause(device):
    api.pause_device(device)


def _stale_settings(device):
    api.update_settings(device, {"copies": 2})


def _disable_silently(device):
    Device.objects.filter(pk=device.pk).update(enabled=False)  # no wake: the socket stays


def _revoke_silently(device):
    Device.objects.filter(pk=device.pk).update(
        token_hash=credentials.hash_secret(credentials.new_secret())
    )


#: A device disabled or its token revoked while its socket stays open, and what its requests get.
silently_refused = pytest.mark.parametrize(
    ("change", "expected"),
    [(_disable_silently, (403, "disabled")), (_revoke_silently, (401, "unauthorized"))],
    ids=["disabled", "unauthorized"],
)


@pytest.fixture
def busless(monkeypatch):
    """No bus for the sockets: a reconcile after subscribing would see a silent change and close
    4001 first (which is what a disabled device's socket does once it learns it)."""
    monkeypatch.setattr(bus.DeviceBus, "_start", lambda self: None)


@pytest.mark.parametrize(
    ("change", "apply", "expected"),
    [
        (_pause, False, (409, "stale_control")),
        (_pause, True, (409, "paused")),
        (_stale_settings, False, (409, "stale_settings")),
        (_disable_silently, False, (403, "disabled")),
        (_revoke_silently, False, (401, "unauthorized")),
    ],
    ids=["stale_control", "paused", "stale_settings", "disabled", "unauthorized"],
)
async def test_claim_refusals_answer_as_http(
    device_factory, sockets, monkeypatch, change, apply, expected
):
    if change in (_disable_silently, _revoke_silently):
        # No bus for this socket: its reconcile after subscribing would see the change and
        # close 4001 first (which is what a disabled device's socket does once it learns it).
        monkeypatch.setattr(bus.DeviceBus, "_start", lambda self: None)
    device, token = await adb(device_factory)
    s = sockets(token)
    hello = await s.hello_and_ready()
    await s.send({"type": "claim", "request_id": "first"})  # the state frame is handled
    assert (await answer(s, "first"))["type"] == "nothing"
    await adb(change, device)
    if apply:  # the device applies the new control revision
        control = await s.receive()
        assert control["type"] == "control"
        await s.send(
            {"type": "state", "control_revision": control["revision"],
             "settings_revision": hello["settings"]["revision"]}
        )  # fmt: skip
    await s.send({"type": "claim", "request_id": "r"})
    over_socket = refusal(await answer(s, "r"))
    over_http = await Http(token).claim()
    assert over_socket == over_http
    assert (over_socket[0], over_socket[1]["error"]) == expected
    await s.send({"type": "claim", "request_id": "again"})  # a refusal does not close the socket
    assert refusal(await answer(s, "again")) == over_socket


async def test_events_answer_as_http(device_factory, sockets):
    device, token = await adb(device_factory)
    await adb(api.submit_job, device.tenant, device.name, b"%PDF-1.4 x", "application/pdf")
    s = sockets(token)
    await s.hello_and_ready()
    http = Http(token)
    await s.send({"type": "claim", "request_id": "c"})
    assignment = await answer(s, "c")
    job_id, claim_id = assignment["job_id"], assignment["claim_id"]

    received = event_body(claim_id, "RECEIVED", message="got it")
    await s.send(as_frame("e1", job_id, received))
    created = await answer(s, "e1")
    assert (created["type"], created["status"]) == ("event_recorded", 201)
    assert created["event"]["job_status"] == "RECEIVED"
    # The same event again: 200 and the same body, over either path.
    await s.send(as_frame("e2", job_id, received))
    replay = await answer(s, "e2")
    assert (replay["status"], replay["event"]) == (200, created["event"])
    assert await http.event(job_id, received) == (200, created["event"])

    # A new event over HTTP is 201, as over the socket.
    spooled = event_body(claim_id, "SPOOLED")
    status, body = await http.event(job_id, spooled)
    assert status == 201 and body["job_status"] == "SPOOLED"

    cases = {
        "conflict": (job_id, {**received, "message": "something else"}),
        "invalid": (job_id, event_body(claim_id, "EXPLODED")),
        "stale_claim": (job_id, event_body(uuid.uuid4(), "PRINTED")),
        "backwards": (job_id, event_body(claim_id, "RECEIVED")),
        "not_found": (str(uuid.uuid4()), event_body(claim_id, "PRINTED")),
    }
    for n, (name, (target, body)) in enumerate(cases.items()):
        await s.send(as_frame(f"x{n}", target, body))
        over_socket = refusal(await answer(s, f"x{n}"))
        assert over_socket == await http.event(target, body), name
    await s.send(as_frame("p", job_id, event_body(claim_id, "PRINTED")))
    printed = await answer(s, "p")
    assert (printed["status"], printed["event"]["job_status"]) == (201, "PRINTED")


async def test_command_result_answers_as_http(device_factory, sockets):
    device, token = await adb(device_factory)
    s = sockets(token)
    await s.hello_and_ready()
    command = await adb(api.send_command, device, "REFRESH", {})
    while (await s.receive())["type"] != "command":
        pass
    command_id = str(command.pk)
    body = {"status": "BOGUS"}
    await s.send({"type": "command_result", "request_id": "bad", "command_id": command_id, **body})
    assert refusal(await answer(s, "bad")) == await Http(token).command_result(command_id, body)

    body = {"status": "DONE", "result": {"ok": True}}
    await s.send({"type": "command_result", "request_id": "ok", "command_id": command_id, **body})
    recorded = await answer(s, "ok")
    assert (recorded["type"], recorded["status"]) == ("command_recorded", 200)
    assert recorded["command"]["status"] == "DONE"
    # A finished command is answered as it is, over either path.
    assert await Http(token).command_result(command_id, body) == (200, recorded["command"])


@pytest.mark.parametrize(
    "frame",
    [
        {"type": "claim"},
        {"type": "claim", "request_id": 7},
        {"type": "claim", "request_id": ""},
        {"type": "claim", "request_id": "x" * 65},
        {"type": "event", "request_id": "e", "event_type": "RECEIVED"},
        {"type": "command_result", "request_id": "c", "status": "DONE"},
    ],
    ids=["no-id", "id-not-string", "id-empty", "id-too-long", "event-no-job", "result-no-command"],
)
async def test_malformed_request_frame_closes_4400(device_and_token, sockets, frame):
    _, token = device_and_token
    s = sockets(token)
    await s.hello_and_ready()
    await s.send(frame)
    while True:
        error = await s.receive()
        if error["type"] == "error":
            break
    assert error["code"] == "protocol_error"
    assert await s.receive_close() == 4400


async def test_a_claim_over_the_socket_is_one_statement_and_an_event_one(
    device_factory, sockets, monkeypatch
):
    from django.db import connection as db

    if db.vendor != "postgresql":
        pytest.skip("the one-statement claim is PostgreSQL's")
    # No bus for this socket: its reconcile after subscribing would be a statement of its own.
    monkeypatch.setattr(bus.DeviceBus, "_start", lambda self: None)
    device, token = await adb(device_factory)
    await adb(api.submit_job, device.tenant, device.name, b"%PDF-1.4 x", "application/pdf")
    s = sockets(token)
    await s.hello_and_ready()
    await s.send({"type": "claim", "request_id": "warm"})  # the state frame's statements done
    await answer(s, "warm")
    statements = observe_statements(monkeypatch)
    await s.send({"type": "claim", "request_id": "c"})
    assignment = await answer(s, "c")
    assert assignment["type"] == "assignment"
    # The device row's lock (which checks the socket's token too) and the claim: one statement.
    assert len(statements) == 1 and statements[0].lstrip().startswith("WITH gate AS"), statements
    statements.clear()
    received = event_body(assignment["claim_id"], "RECEIVED")
    await s.send(as_frame("e", assignment["job_id"], received))
    assert (await answer(s, "e"))["status"] == 201
    # One statement: the job row's lock (with the device's token) gating the event and the move;
    # left out, the read of the socket's own reconcile that the job's release may start meanwhile.
    reconcile = "WHERE id = %s AND connection_id = %s"
    sent = [q for q in statements if reconcile not in q]
    assert len(sent) == 1 and sent[0].lstrip().startswith("WITH gate AS"), statements


async def test_another_tenants_job_or_command_is_answered_as_one_that_does_not_exist(
    device_factory, sockets
):
    """The tenant matrix for the operation frames: a job or command of another tenant's device
    gets, over the socket, the answer a job or command that does not exist gets."""
    _mine, token = await adb(device_factory, "acme")
    theirs, _ = await adb(device_factory, "globex")
    job, _ = await adb(api.submit_job, "globex", theirs.name, b"%PDF-1.4 x", "application/pdf")
    command = await adb(api.send_command, theirs, "REFRESH", {})
    s = sockets(token)
    await s.hello_and_ready()

    body = event_body(uuid.uuid4(), "RECEIVED")
    await s.send(as_frame("their-job", str(job.pk), body))
    await s.send(as_frame("no-job", str(uuid.uuid4()), body))
    their_job, no_job = refusal(await answer(s, "their-job")), refusal(await answer(s, "no-job"))
    assert their_job == no_job and their_job[0] == 404

    result = {"status": "DONE", "result": {}}
    for rid, command_id in (("their-command", command.pk), ("no-command", uuid.uuid4())):
        frame = {"type": "command_result", "request_id": rid, "command_id": str(command_id)}
        await s.send({**frame, **result})
    their_command = refusal(await answer(s, "their-command"))
    assert their_command == refusal(await answer(s, "no-command")) and their_command[0] == 404
    assert await adb(lambda: type(command).objects.get(pk=command.pk).status) == "PENDING"


#: The series the socket's claims and events move, and one of the HTTP path's (which must not).
_SERIES = {
    "assignment": ("qprint_claims_total", {"status": "200", "answer": "assignment"}, "socket"),
    "created": ("qprint_events_total", {"status": "201", "answer": "created"}, "socket"),
    "stale": ("qprint_events_total", {"status": "409", "answer": "stale_claim"}, "socket"),
    "claims_timed": ("qprint_claim_duration_seconds_count", {}, "socket"),
    "events_timed": ("qprint_event_duration_seconds_count", {}, "socket"),
    "http_claims": ("qprint_claim_duration_seconds_count", {}, "http"),
}


def _counted() -> dict[str, float]:
    from qprint.metrics import instruments

    return {
        key: instruments.PROCESS.get_sample_value(name, {**labels, "path": path}) or 0.0
        for key, (name, labels, path) in _SERIES.items()
    }


async def test_claims_and_events_over_the_socket_are_counted_and_timed_like_http(
    device_factory, sockets
):
    before = _counted()
    _, _, s, assignment = await claimed_over_the_socket(device_factory, sockets)
    job_id, claim_id = assignment["job_id"], assignment["claim_id"]
    await s.send(as_frame("e1", job_id, event_body(claim_id, "RECEIVED")))
    assert (await answer(s, "e1"))["status"] == 201
    await s.send(as_frame("e2", job_id, event_body(uuid.uuid4(), "PRINTED")))
    assert refusal(await answer(s, "e2"))[0] == 409
    after = _counted()
    assert {k: after[k] - before[k] for k in before} == {
        "assignment": 1,
        "created": 1,
        "stale": 1,
        "claims_timed": 1,
        "events_timed": 2,
        "http_claims": 0,
    }


@silently_refused
async def test_an_event_after_a_silent_revocation_is_refused_as_over_http(
    device_factory, sockets, change, expected, busless
):
    device, token, s, assignment = await claimed_over_the_socket(device_factory, sockets)
    await adb(change, device)
    good = event_body(assignment["claim_id"], "RECEIVED")
    invalid = event_body(assignment["claim_id"], "EXPLODED")
    # Its job, no job, a body the HTTP API would refuse 422 after authenticating: 401/403 first.
    cases = [
        (assignment["job_id"], good),
        (str(uuid.uuid4()), good),
        (assignment["job_id"], invalid),
    ]
    for n, (target, body) in enumerate(cases):
        await s.send(as_frame(f"e{n}", target, body))
        status, refused = refusal(await answer(s, f"e{n}"))
        assert (status, refused["error"]) == expected, (target, body["type"])
        assert await Http(token).event(target, body) == (status, refused)
    job = await adb(lambda: PrintJob.objects.get(pk=assignment["job_id"]))
    assert job.status == "CLAIMED"  # nothing recorded


async def _claimed_with_socket(device_factory, sockets):
    device, token = await adb(device_factory)
    await adb(api.submit_job, device.tenant, device.name, b"%PDF-1.4 x", "application/pdf")
    s = sockets(token)
    await s.hello_and_ready()
    await s.send({"type": "claim", "request_id": "c"})
    return device, s, await answer(s, "c")


async def test_events_sent_without_waiting_are_recorded_together_and_answered_in_order(
    device_factory, sockets, monkeypatch
):
    """RECEIVED, SPOOLED and PRINTED sent back to back: one transaction for the three (one
    commit), three answers in request order, the job PRINTED; a claim frame sent behind them is
    answered after them (request frames are answered in order)."""
    from qprint.domain import events

    batches: list[int] = []
    real = events.record_events_together

    def spy(device_id, reports, **kwargs):
        batches.append(len(reports))
        return real(device_id, reports, **kwargs)

    monkeypatch.setattr(events, "record_events_together", spy)
    _, s, assignment = await _claimed_with_socket(device_factory, sockets)
    job_id, claim_id = assignment["job_id"], assignment["claim_id"]
    for rid, kind in (("r", "RECEIVED"), ("s", "SPOOLED"), ("p", "PRINTED")):
        await s.send(as_frame(rid, job_id, event_body(claim_id, kind)))
    await s.send({"type": "claim", "request_id": "next"})
    got = [await answer(s, rid) for rid in ("r", "s", "p", "next")]  # wakes skipped
    assert [f["request_id"] for f in got] == ["r", "s", "p", "next"]
    assert [f["event"]["type"] for f in got[:3]] == ["RECEIVED", "SPOOLED", "PRINTED"]
    assert all(f["status"] == 201 for f in got[:3]) and got[3]["type"] == "nothing"
    assert await adb(lambda: PrintJob.objects.get(pk=job_id).status) == "PRINTED"
    from django.db import connection as db

    if db.vendor == "postgresql":
        assert batches == [3], batches


async def test_a_refused_event_among_others_refuses_only_itself(device_factory, sockets):
    """The middle one of three events sent at once goes backwards: it alone is refused (409),
    the others are recorded, answers in order."""
    _, s, assignment = await _claimed_with_socket(device_factory, sockets)
    job_id, claim_id = assignment["job_id"], assignment["claim_id"]
    frames = [("a", "RECEIVED"), ("b", "QUEUED"), ("c", "PRINTED")]
    for rid, kind in frames:
        await s.send(as_frame(rid, job_id, event_body(claim_id, kind)))
    got = [await answer(s, rid) for rid, _ in frames]  # in order, wakes skipped
    assert [(f["request_id"], f["type"]) for f in got] == [
        ("a", "event_recorded"), ("b", "refused"), ("c", "event_recorded"),
    ]  # fmt: skip
    assert got[1]["status"] in (409, 422), got[1]
    assert await adb(lambda: PrintJob.objects.get(pk=job_id).status) == "PRINTED"


async def test_a_malformed_frame_behind_events_closes_4400_after_their_answers(
    device_factory, sockets
):
    _, s, assignment = await _claimed_with_socket(device_factory, sockets)
    job_id, claim_id = assignment["job_id"], assignment["claim_id"]
    await s.send(as_frame("r", job_id, event_body(claim_id, "RECEIVED")))
    await s.send({"type": "event", "request_id": "bad"})  # no job_id
    await answer(s, "r")
    error = await s.receive()
    assert (error["type"], error["code"]) == ("error", "protocol_error")
    assert await s.receive_close() == 4400
    assert await adb(lambda: PrintJob.objects.get(pk=job_id).status) == "RECEIVED"


@silently_refused
async def test_a_malformed_inline_limit_of_a_revoked_device_is_refused_for_its_standing_first(
    device_factory, sockets, change, expected, busless
):
    # As for a malformed event: the device's standing is answered before what the frame says.
    device, token = await adb(device_factory)
    s = sockets(token)
    await s.hello_and_ready()
    await s.send({"type": "claim", "request_id": "first"})  # the state frame is handled
    assert (await answer(s, "first"))["type"] == "nothing"
    await adb(change, device)
    await s.send({"type": "claim", "request_id": "c", "inline_max_bytes": -1})
    status, refused = refusal(await answer(s, "c"))
    assert (status, refused["error"]) == expected
