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
