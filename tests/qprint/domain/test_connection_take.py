"""A take of the connection record says whether it displaced a connection (``Taken.displaced``):
only then can an older socket be open somewhere, and only then does the new socket publish
``replaced`` through the channel layer (docs/REALTIME.md). Both ways of a take (the upgrade's one
statement, and the full way a tenant with webhooks or SQLite takes), and, on PostgreSQL, a take
that waited for another's lock sees the connection that other take committed."""

from __future__ import annotations

import uuid

import pytest
from django.db import connection

from qprint.domain import connection as connections
from qprint.domain import credentials
from qprint.domain.device_operations import open_socket
from qprint.models import Device, WebhookEndpoint
from tests.qprint.helpers import make_device, waited_for_a_lock

pytestmark = pytest.mark.django_db(transaction=True)


def upgrade(token: str):
    """A socket's upgrade as the consumer makes it (the one statement on PostgreSQL)."""
    return open_socket(credentials.PresentedToken(token, "127.0.0.30"), uuid.uuid4(), "node-u", 20)


def full_way(device_id: int, connection_id: uuid.UUID | None = None):
    return connections.take(device_id, connection_id or uuid.uuid4(), "node-f", 20)


def connection_of(device_id: int) -> uuid.UUID:
    """The connection the row names."""
    return Device.objects.values_list("connection_id", flat=True).get(pk=device_id)


def test_an_upgrade_displaces_only_a_connection_the_row_still_names():
    made = make_device()
    _, first = upgrade(made.token)
    assert not first.displaced  # a device never connected
    _, second = upgrade(made.token)
    assert second.displaced  # the first socket may still be open
    device, taken = upgrade(made.token)
    assert taken.displaced
    assert connections.clear(device.pk, connection_of(device.pk))  # its socket closed
    _, after_close = upgrade(made.token)
    assert not after_close.displaced


def test_the_full_way_displaces_only_a_connection_the_row_still_names():
    made = make_device()
    WebhookEndpoint.objects.create(tenant="acme", url="https://hooks.example.com/q", secret="x")
    assert not full_way(made.device.pk).displaced
    assert full_way(made.device.pk).displaced
    assert connections.clear(made.device.pk, connection_of(made.device.pk))
    assert not full_way(made.device.pk).displaced
    _, taken = upgrade(made.token)  # the tenant has webhooks: the consumer's full way
    assert taken.displaced


@pytest.mark.services
@pytest.mark.parametrize("way", ["upgrade", "full way"])
def test_a_take_that_waited_for_anothers_lock_displaces_the_connection_committed_meanwhile(way):
    """Two sockets of a never-connected device take the row at once: the second take waits for
    the first's lock and must see the connection the first committed (its statement's snapshot,
    taken before the wait, names none), or the first socket would never hear ``replaced``."""
    if connection.vendor != "postgresql":
        pytest.skip("row locks: PostgreSQL")
    made = make_device()
    taken = waited_for_a_lock(
        lambda: full_way(made.device.pk),
        (lambda: upgrade(made.token)[1]) if way == "upgrade" else lambda: full_way(made.device.pk),
        "%qprint_device%",
        "the second take waiting on the first's lock",
    )
    assert isinstance(taken, connections.Taken), taken
    assert taken.displaced


def test_upgrades_taken_in_one_statement_each_take_their_own_row():
    """The upgrades of a connect burst (``qprint.realtime.gathered``): one statement takes each
    agent's row for its own connection, node and lease, with its own active jobs and whether it
    displaced a connection; a token it does not take is answered None (the full way)."""
    from django.db.models import F
    from django.test.utils import CaptureQueriesContext

    if connection.vendor != "postgresql":
        pytest.skip("one statement: PostgreSQL (SQLite takes each the full way)")
    fresh, known = make_device(name="fresh"), make_device(name="known")
    _, before = upgrade(known.token)
    assert not before.displaced
    upgrades = [
        (credentials.hash_secret(known.token), uuid.uuid4(), "node-a", 20.0),
        (credentials.hash_secret("no such token"), uuid.uuid4(), "node-a", 20.0),
        (credentials.hash_secret(fresh.token), uuid.uuid4(), "node-b", 60.0),
    ]
    with CaptureQueriesContext(connection) as queries:
        taken_known, unknown, taken_fresh = connections.take_presented(upgrades)
    assert len(queries) == 1 and unknown is None
    assert taken_known[0].pk == known.device.pk and taken_known[1].displaced
    assert taken_fresh[0].pk == fresh.device.pk and not taken_fresh[1].displaced
    rows = {
        d.pk: d
        for d in Device.objects.annotate(lease=F("connection_lease_expires_at")).filter(
            pk__in=[known.device.pk, fresh.device.pk]
        )
    }
    assert (rows[known.device.pk].connection_id, rows[known.device.pk].connection_node) == (
        upgrades[0][1],
        "node-a",
    )
    assert (rows[fresh.device.pk].connection_id, rows[fresh.device.pk].connection_node) == (
        upgrades[2][1],
        "node-b",
    )
    assert not rows[fresh.device.pk].connection_ready
    # three heartbeats of each upgrade's own: 180 s against 60 s
    assert (rows[fresh.device.pk].lease - rows[known.device.pk].lease).total_seconds() > 100
    with pytest.raises(ValueError, match="same token"):
        connections.take_presented([upgrades[0], upgrades[0]])


def test_upgrades_opened_together_are_each_answered_as_if_alone():
    """``open_sockets``: an upgrade the statement did not take takes the one way in, and each
    gets its own answer: its device, 401 for an unknown token, 403 for a disabled device; a
    tenant with webhooks takes its row the full way, with its delivery."""
    from qprint.core.errors import QPrintError
    from qprint.domain.device_operations import open_sockets

    plain, disabled = make_device(name="plain"), make_device(name="disabled", enabled=False)
    announced = make_device(tenant="hooked", name="announced")
    WebhookEndpoint.objects.create(tenant="hooked", url="https://hooks.example.com/q", secret="x")

    def presented(token: str):
        return credentials.PresentedToken(token, "127.0.0.31")

    tokens = [plain.token, "no such token", disabled.token, announced.token]
    answers = open_sockets([(presented(t), uuid.uuid4(), "node-u", 20.0) for t in tokens])
    assert answers[0][0].pk == plain.device.pk and answers[3][0].pk == announced.device.pk
    assert [(a.status, a.code) for a in answers[1:3] if isinstance(a, QPrintError)] == [
        (401, "unauthorized"),
        (403, "disabled"),
    ]
    assert connection_of(plain.device.pk) and connection_of(announced.device.pk)
    assert connection_of(disabled.device.pk) is None


@pytest.mark.services
def test_bursts_of_two_nodes_over_the_same_devices_never_wait_on_each_other_crosswise():
    """Two nodes' connect bursts present the same devices in opposite orders, at once, again and
    again: each statement locks its rows in the order of their ids, so none deadlocks, and every
    row ends named by one of the connections that took it."""
    from tests.qprint.helpers import run_concurrently

    if connection.vendor != "postgresql":
        pytest.skip("row locks: PostgreSQL")
    # A table of a deployment's size, so that the plan is a deployment's (the devices found
    # through their token's index, then sorted by id for their locks).
    Device.objects.bulk_create(
        Device(tenant="crowd", name=f"idle-{n}", token_hash=f"{n:064x}") for n in range(3000)
    )
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {Device._meta.db_table}")
    made = [make_device(name=f"burst-{n}") for n in range(12)]
    hashes = [credentials.hash_secret(m.token) for m in made]
    taken_by: dict[int, set[uuid.UUID]] = {m.device.pk: set() for m in made}
    for _ in range(5):
        orders = [hashes, hashes[::-1], hashes[6:] + hashes[:6], hashes[::2] + hashes[1::2]]

        def burst(i: int, orders=orders):
            upgrades = [(h, uuid.uuid4(), f"node-{i}", 20.0) for h in orders[i]]
            return upgrades, connections.take_presented(upgrades)

        results = run_concurrently(len(orders), burst)
        assert [kind for kind, _ in results] == ["ok"] * len(orders), results
        for _, (upgrades, answers) in results:
            assert all(answer is not None for answer in answers)
            for (_, connection_id, _, _), (device, _) in zip(upgrades, answers, strict=True):
                taken_by[device.pk].add(connection_id)
        for m in made:
            assert connection_of(m.device.pk) in taken_by[m.device.pk]
