"""Pushed assignments across two real Daphne nodes (A, B) on PostgreSQL and a Redis of the test's
own: a job accepted on A is claimed and pushed by B, the node holding the device's socket; the
next job follows the held one's RECEIVED, recorded on either node; a held job is pushed again,
same claim_id, by the node the device reconnects to."""

from __future__ import annotations

import base64
import hashlib

import pytest

from qprint.models import Device, PrintJob
from tests.qprint.realtime.cluster import RealDevice, eventually
from tests.qprint.realtime.conftest import event_frame

pytestmark = [pytest.mark.services, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

INLINE = 4096


def job_row(job_id: str) -> PrintJob:
    return PrintJob.objects.get(pk=job_id)


async def ready(device: Device) -> None:
    await eventually(
        lambda: Device.objects.get(pk=device.pk).connection_ready,
        10,
        f"{device.name} ready",
        database=True,
    )


async def test_a_job_accepted_on_a_is_claimed_and_pushed_by_b(nodes, devices, http):
    a, b = nodes
    device, real = await devices("desk-push", push=INLINE)
    await real.connect(b.ws)
    await ready(device)
    submitted = await http.submit(a, "desk-push", title="pushed")
    assert submitted.status_code == 201, submitted.text
    job_id = submitted.json()["id"]
    pushed = await real.frame("assignment")
    assert (pushed["pushed"], pushed["job_id"]) == (True, job_id)
    document = base64.b64decode(pushed["document_base64"])
    assert hashlib.sha256(document).hexdigest() == pushed["sha256"] == submitted.json()["sha256"]
    row = await eventually(lambda: job_row(job_id), 5, "the job", database=True)
    assert (row.status, str(row.claim_id), row.claim_node) == (
        "CLAIMED",
        pushed["claim_id"],
        "node-b",
    )
    assert not [f for f in real.seen if f["type"] == "wake"], real.seen


async def test_the_next_job_follows_received_recorded_on_either_node(nodes, devices, http):
    """RECEIVED over the socket on B pushes job 2 at once; RECEIVED of job 2 over HTTP on A
    reaches B as a wakeup, and B pushes job 3."""
    a, b = nodes
    device, real = await devices("desk-next", push=INLINE)
    await real.connect(b.ws)
    await ready(device)
    ids = []
    for title in ("one", "two", "three"):
        r = await http.submit(a, "desk-next", title=title)
        assert r.status_code == 201, r.text
        ids.append(r.json()["id"])
    one = await real.frame("assignment")
    assert one["job_id"] == ids[0]
    await real.send(event_frame("r1", one, "RECEIVED"))
    assert (await real.frame("event_recorded"))["status"] == 201
    two = await real.frame("assignment")
    assert two["job_id"] == ids[1]
    r = await http.event(a, real.token, two["job_id"], two["claim_id"], "RECEIVED")
    assert r.status_code == 201, r.text
    three = await real.frame("assignment")
    assert three["job_id"] == ids[2]
    claimed = await eventually(
        lambda: [job_row(j).claim_node for j in ids], 5, "claims", database=True
    )
    assert claimed == ["node-b"] * 3


async def test_a_held_job_is_pushed_again_by_the_node_the_device_moves_to(nodes, devices, http):
    a, b = nodes
    device, real = await devices("desk-move", push=INLINE)
    await real.connect(b.ws)
    await ready(device)
    r = await http.submit(a, "desk-move")
    assert r.status_code == 201, r.text
    first = await real.frame("assignment")
    await real.close()
    moved = RealDevice(real.token, push=INLINE)  # the same device, reconnecting to A
    try:
        await moved.connect(a.ws)
        replay = await moved.frame("assignment")
        assert (replay["job_id"], replay["claim_id"]) == (first["job_id"], first["claim_id"])
        row = await eventually(lambda: job_row(first["job_id"]), 5, "the job", database=True)
        assert (row.status, row.attempts, row.claim_node) == ("CLAIMED", 1, "node-b")
    finally:
        await moved.close()
