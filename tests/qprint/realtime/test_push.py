"""Pushed assignments on the consumer (docs/PROTOCOL.md, "Pushed assignments"): the socket claims
for its device with the claim function and its gate, sends the assignment with the document inline
when small, pushes the next job once the held one is RECEIVED, pushes a held job again on the next
connection (same claim_id), and never sends ``wake`` in push mode."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import uuid

import pytest
from django.test import override_settings

from qprint import api
from qprint.core.conf import qprint_settings
from qprint.domain import connection
from qprint.models import PrintJob
from qprint.realtime import bus
from tests.qprint.realtime.conftest import (
    adb,
    close_bus,
    event_frame,
    observe_statements,
    redis_layers,
)
from tests.qprint.realtime.test_consumer import wait_idle
from tests.waiting import eventually

pytestmark = pytest.mark.django_db(transaction=True)

DOCUMENT = b"%PDF-1.4 pushed\n" + b"x" * 100


def submit(device, content: bytes = DOCUMENT) -> str:
    job, _created = api.submit_job(device.tenant, device.name, content, "application/pdf")
    return str(job.pk)


def job_row(job_id: str) -> PrintJob:
    return PrintJob.objects.get(pk=job_id)


async def test_a_job_queued_before_connect_is_pushed_with_its_document_inline(
    device_and_token, sockets
):
    device, token = device_and_token
    job_id = await adb(submit, device)
    s = sockets(token)
    await s.hello_and_ready(push=4096)
    frame = await s.receive()
    assert frame["type"] == "assignment" and frame["pushed"] is True
    assert "request_id" not in frame
    assert frame["job_id"] == job_id
    document = base64.b64decode(frame["document_base64"])
    assert document == DOCUMENT
    assert hashlib.sha256(document).hexdigest() == frame["sha256"]
    row = await adb(job_row, job_id)
    assert (row.status, str(row.claim_id)) == ("CLAIMED", frame["claim_id"])
    # Relative to qprint's mount: the agent resolves it against its own base URL.
    assert frame["document_url"] == f"api/v1/device/jobs/{job_id}/document"
    assert await s.nothing(0.3)  # no wake, nothing pushed twice


async def test_a_job_submitted_while_connected_is_pushed_never_woken(device_and_token, sockets):
    device, token = device_and_token
    s = sockets(token)
    await s.hello_and_ready(push=4096)
    assert await s.nothing(0.3)
    job_id = await adb(submit, device)
    frame = await s.receive()
    assert (frame["type"], frame["job_id"], frame["pushed"]) == ("assignment", job_id, True)


async def test_a_pushed_wakeup_reads_the_connection_and_claims_in_one_statement(
    device_and_token, sockets, monkeypatch
):
    """The wakeup of a ready socket in push mode: the device row locked with what the
    connection's read says (guarded by the socket's connection) and the claim, in one statement
    committed by itself; no read of its own before."""
    from django.db import connection as db

    if db.vendor != "postgresql":
        pytest.skip("the claim's row lock (FOR NO KEY UPDATE) is PostgreSQL's")
    device, token = device_and_token
    s = sockets(token)
    await s.hello_and_ready(push=4096)
    await wait_idle(s, device.pk)
    statements = observe_statements(monkeypatch)
    job_id = await adb(submit, device)
    frame = await s.receive()
    assert (frame["type"], frame["job_id"], frame["pushed"]) == ("assignment", job_id, True)
    assert len(statements) == 1, statements
    [claim] = statements
    assert claim.lstrip().startswith("WITH gate AS") and "FOR NO KEY UPDATE" in claim, claim
    assert '"connection_id" = (%s)' in claim, claim


async def test_a_wakeup_whose_row_asks_for_other_frames_sends_them_before_the_assignment(
    device_and_token, sockets
):
    """A command and a job at once: the wakeup's one statement claims nothing (the row has a
    pending command the socket has not handed out); the command goes out, then the
    assignment."""
    device, token = device_and_token
    s = sockets(token)
    await s.hello_and_ready(push=4096)
    await wait_idle(s, device.pk)

    def command_and_job():
        from django.db import transaction

        with transaction.atomic():
            command = api.send_command(device, "REFRESH", {})
            return str(command.pk), submit(device)

    command_id, job_id = await adb(command_and_job)
    command = await s.receive()
    assert (command["type"], command["command_id"]) == ("command", command_id)
    frame = await s.receive()
    assert (frame["type"], frame["job_id"], frame["pushed"]) == ("assignment", job_id, True)


async def test_a_tenant_with_webhooks_gets_its_pushed_jobs_and_their_deliveries(
    device_and_token, sockets
):
    """The wakeup's one statement claims nothing for a tenant with a webhook endpoint (the
    deliveries are written in the claim's transaction): the session's plan still pushes, the
    claim taking the transaction's way, and ``job.claimed`` is delivered."""
    from qprint.domain import events
    from qprint.models import WebhookDelivery, WebhookEndpoint

    device, token = device_and_token
    await adb(
        WebhookEndpoint.objects.create,
        tenant=device.tenant,
        url="https://hooks.example.com/q",
        secret="whsec_x",
    )
    events._ANNOUNCING.clear()
    s = sockets(token)
    await s.hello_and_ready(push=4096)
    await wait_idle(s, device.pk)
    job_id = await adb(submit, device)
    frame = await s.receive()
    assert (frame["type"], frame["job_id"], frame["pushed"]) == ("assignment", job_id, True)
    row = await adb(job_row, job_id)
    assert (row.status, str(row.claim_id)) == ("CLAIMED", frame["claim_id"])
    claimed = WebhookDelivery.objects.filter(type="job.claimed")
    assert await adb(claimed.count) == 1


async def test_a_pushed_wakeup_of_a_replaced_connection_closes_it_4000(device_and_token, sockets):
    """The claim's lock of a pushed wakeup is guarded by the socket's connection as the read
    was: a row another connection took closes the socket (4000) and claims nothing."""
    device, token = device_and_token
    s = sockets(token)
    await s.hello_and_ready(push=4096)
    await wait_idle(s, device.pk)
    await adb(connection.take, device.pk, uuid.uuid4(), "elsewhere", 20)  # no replaced message
    job_id = await adb(submit, device)
    assert await s.receive_close() == 4000
    assert (await adb(job_row, job_id)).status == "QUEUED"


async def test_a_document_over_the_limit_is_downloaded(device_and_token, sockets):
    device, token = device_and_token
    await adb(submit, device)
    s = sockets(token)
    await s.hello_and_ready(push=len(DOCUMENT) - 1)
    frame = await s.receive()
    assert frame["pushed"] and "document_base64" not in frame and frame["document_url"]


@override_settings(QPRINT={"INLINE_DOCUMENT_MAX_BYTES": 10})
async def test_the_server_caps_the_inline_size_the_device_asks_for(device_and_token, sockets):
    assert qprint_settings.INLINE_DOCUMENT_MAX_BYTES == 10
    device, token = device_and_token
    await adb(submit, device)
    s = sockets(token)
    await s.hello_and_ready(push=10**6)
    frame = await s.receive()
    assert frame["pushed"] and "document_base64" not in frame


async def test_the_next_job_is_pushed_once_the_held_one_is_received(device_and_token, sockets):
    """Job 2 goes out right after RECEIVED of job 1 is answered: while job 1 prints. PRINTED of
    job 1 pushes nothing (job 2 is held and was pushed already)."""
    device, token = device_and_token
    first = await adb(submit, device)
    second = await adb(submit, device)
    s = sockets(token)
    await s.hello_and_ready(push=4096)
    one = await s.receive()
    assert one["job_id"] == first
    assert await s.nothing(0.3)  # job 2 waits: one CLAIMED job per device
    await s.send(event_frame("r1", one, "RECEIVED"))
    answer = await s.receive()
    assert (answer["type"], answer["request_id"], answer["status"]) == ("event_recorded", "r1", 201)
    two = await s.receive()
    assert (two["type"], two["job_id"], two["pushed"]) == ("assignment", second, True)
    await s.send(event_frame("r2", one, "PRINTED"))
    assert (await s.receive())["request_id"] == "r2"
    assert await s.nothing(0.3)


async def test_a_held_job_is_pushed_again_on_the_next_connection_with_its_claim_id(
    device_and_token, sockets
):
    device, token = device_and_token
    job_id = await adb(submit, device)
    s = sockets(token)
    await s.hello_and_ready(push=4096)
    first = await s.receive()
    await s.close()
    again = sockets(token)
    await again.hello_and_ready(push=4096)
    replay = await again.receive()
    assert (replay["job_id"], replay["claim_id"]) == (job_id, first["claim_id"])
    # A claim frame answers the same claim too.
    await again.send({"type": "claim", "request_id": "c"})
    claimed = await again.receive()
    assert (claimed["request_id"], claimed["claim_id"]) == ("c", first["claim_id"])
    row = await adb(job_row, job_id)
    assert (row.status, row.attempts) == ("CLAIMED", 1)  # one QUEUED -> CLAIMED transition


async def test_a_paused_device_gets_no_push_until_resumed(device_and_token, sockets):
    device, token = device_and_token
    await adb(api.pause_device, device.pk)
    await adb(submit, device)
    s = sockets(token)
    hello = await s.hello_and_ready(push=4096)
    assert hello["control"]["paused"] is True
    assert await s.nothing(0.3)
    await adb(api.resume_device, device.pk)
    control = await s.receive()
    assert control["type"] == "control" and control["paused"] is False
    push = {"inline_max_bytes": 4096}
    revisions = {"control_revision": control["revision"], "settings_revision": 1}
    await s.send({"type": "state", **revisions, "push": push})
    frame = await s.receive()
    assert frame["type"] == "assignment" and frame["pushed"]


async def test_without_push_the_device_is_woken_as_before(device_and_token, sockets):
    device, token = device_and_token
    await adb(submit, device)
    s = sockets(token)
    await s.hello_and_ready()
    assert await s.receive() == {"type": "wake"}
    assert await adb(lambda: PrintJob.objects.get(device=device).status) == "QUEUED"


async def test_received_over_the_pushing_socket_publishes_no_wakeup(device_and_token, sockets):
    """The socket that pushed the job claims the next one itself once RECEIVED is recorded: the
    job leaving CLAIMED wakes nobody (over HTTP, or without push, it wakes the device)."""
    from qprint.domain import wakeups

    device, token = device_and_token
    await adb(submit, device)
    await adb(submit, device)
    s = sockets(token)
    await s.hello_and_ready(push=4096)
    one = await s.receive()
    recording = wakeups.RecordingPublisher()
    previous = wakeups.set_publisher(recording)
    try:
        await s.send(event_frame("r1", one, "RECEIVED"))
        assert (await s.receive())["request_id"] == "r1"
        assert (await s.receive())["pushed"] is True  # job 2, pushed without a wakeup
        assert [r for r in recording.recorded if r[2] == "job_released"] == []
    finally:
        wakeups.set_publisher(previous)


async def test_a_job_submitted_after_a_release_with_nothing_queued_is_pushed(
    device_and_token, sockets
):
    """RECEIVED of the only job claims nothing (its statement saw no other job); the next job,
    submitted afterwards, is pushed on its wakeup."""
    device, token = device_and_token
    first = await adb(submit, device)
    s = sockets(token)
    await s.hello_and_ready(push=4096)
    one = await s.receive()
    assert one["job_id"] == first
    await s.send(event_frame("r1", one, "RECEIVED"))
    assert (await s.receive())["request_id"] == "r1"
    assert await s.nothing(0.3)
    second = await adb(submit, device)
    two = await s.receive()
    assert (two["type"], two["job_id"], two["pushed"]) == ("assignment", second, True)


@pytest.mark.parametrize("push", [False, True])
async def test_a_release_wakeup_that_found_nothing_queued_is_read_only_in_push_mode(
    device_and_token, sockets, push
):
    """The wakeup of a job that left CLAIMED while nothing else of its device was queued: a
    socket that only wakes its device reads nothing for it (a job committed later wakes it
    itself); one in push mode reads its row all the same, and pushes what it finds. Here a job
    waits whose own wakeup was lost, so only a read finds it."""
    from qprint.domain import wakeups

    device, token = device_and_token
    s = sockets(token)
    await s.hello_and_ready(push=4096 if push else None)
    await wait_idle(s, device.pk)
    previous = wakeups.set_publisher(wakeups.RecordingPublisher())
    try:
        job_id = await adb(submit, device)  # its wakeup lost
    finally:
        wakeups.set_publisher(previous)
    publisher = wakeups.get_publisher()
    publisher.publish(device.tenant, device.pk, wakeups.JOB_RELEASED_NOTHING_QUEUED)
    if push:
        frame = await s.receive()
        assert (frame["type"], frame["job_id"], frame["pushed"]) == ("assignment", job_id, True)
        return
    # Handled in order: the plain wakeup after it is the one that wakes the device.
    publisher.publish(device.tenant, device.pk, wakeups.JOB_RELEASED)
    assert await s.receive() == {"type": "wake"}
    assert await s.nothing(0.3)


@contextlib.asynccontextmanager
async def pushing_socket_on_redis(settings, sockets, device, token):
    """The device's socket in push mode, ready, with this test's sockets and wakeups on a Redis of
    its own (the layer of a node of several); yields it and the wakeup publisher's counters."""
    from qprint.domain import wakeups
    from tests.processes import RedisServer

    server = await asyncio.to_thread(RedisServer().start)
    settings.CHANNEL_LAYERS = redis_layers(server.url)
    try:
        s = sockets(token)
        await s.hello_and_ready(push=4096)
        await wait_idle(s, device.pk)
        yield s, wakeups.get_publisher().counters
    finally:
        for device_bus in bus.all_buses():
            if device_bus.loop is asyncio.get_running_loop():
                await close_bus(device_bus)
        await asyncio.to_thread(server.stop)


@pytest.mark.services
async def test_a_wakeup_of_a_socket_here_that_holds_its_row_sends_no_copy_through_redis(
    device_and_token, sockets, settings
):
    """A job accepted on the node holding its device's socket in push mode: the socket is handed
    the wakeup, claims, and its claim's lock finds its connection holding the row. The wakeup's
    copy through Redis, for a newer socket of the device on another node, is never sent: a socket
    that takes the row after that lock reads the row after taking it. So for the next job,
    submitted while the first is held: its wakeup's read pushes nothing, and RECEIVED pushes it."""
    device, token = device_and_token
    async with pushing_socket_on_redis(settings, sockets, device, token) as (s, counters):
        queued, local = counters.queued, counters.delivered_locally
        job_id = await adb(submit, device)
        frame = await s.receive()
        assert (frame["type"], frame["job_id"]) == ("assignment", job_id)
        device_bus = bus.current()
        await eventually(lambda: device_bus.copies_saved == 1, 5, message="the copy not sent")
        assert device_bus._owed == {}
        assert (counters.queued, counters.delivered_locally) == (queued, local + 1)

        second = await adb(submit, device)
        await eventually(lambda: device_bus.copies_saved == 2, 5, message="held: not sent")
        assert await s.nothing(0.2)
        await s.send(event_frame("r1", frame, "RECEIVED"))
        assert (await s.receive())["request_id"] == "r1"
        pushed = await s.receive()
        assert (pushed["type"], pushed["job_id"]) == ("assignment", second)
        assert (counters.queued, counters.delivered_locally) == (queued, local + 2)
        await s.close()


@pytest.mark.services
async def test_a_wakeup_of_a_socket_here_whose_row_was_taken_sends_its_copy_through_redis(
    device_and_token, sockets, settings
):
    """The same, but another connection (on another node) took the device's row and its
    ``replaced`` has not arrived: the socket's claim finds the row taken and closes it (4000),
    and the wakeup's copy goes through Redis for that connection's socket."""
    device, token = device_and_token
    async with pushing_socket_on_redis(settings, sockets, device, token) as (s, counters):
        published = counters.published
        await adb(connection.take, device.pk, uuid.uuid4(), "elsewhere", 20)  # no replaced
        job_id = await adb(submit, device)
        assert await s.receive_close() == 4000
        await eventually(lambda: counters.published == published + 1, 5, message="copy sent")
        assert bus.current().copies_saved == 0
        assert (await adb(job_row, job_id)).status == "QUEUED"
