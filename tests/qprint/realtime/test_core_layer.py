"""The core ``RedisChannelLayer`` with a short ``group_expiry``: a connection older than the expiry
is still woken through the bus (its process re-adds the group before it expires).

The heartbeat is long here (30 s), so a wake that arrives within seconds came over the bus, not
from the next ping.
"""

from __future__ import annotations

import asyncio

import pytest
from channels.db import database_sync_to_async

from qprint import api
from tests.processes import RedisServer, wait_for_other_sessions_to_end
from tests.qprint.realtime.cluster import (
    Http,
    Node,
    RealDevice,
    database_url_of,
    node_env,
    nodes_done_with_sockets,
)

pytestmark = [pytest.mark.services, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

GROUP_EXPIRY = 2


@pytest.fixture(scope="module")
def core_node(django_db_setup, django_db_blocker):
    from django.db import connection

    with django_db_blocker.unblock():
        database_url = database_url_of(connection.settings_dict)
    redis = RedisServer().start()
    env = node_env(
        database_url,
        redis.url,
        "node-core",
        QPRINT_CHANNEL_LAYER="core",
        QPRINT_GROUP_EXPIRY=str(GROUP_EXPIRY),
        QPRINT_HEARTBEAT_SECONDS="30",
    )
    node = Node("node-core", env)
    try:
        yield node.start()
    finally:
        node.stop()
        redis.stop()
        wait_for_other_sessions_to_end(django_db_blocker)


async def test_connection_older_than_group_expiry_is_still_woken(core_node, transactional_db):
    _, secret = await database_sync_to_async(api.create_application_key)("acme", "backend")
    _, token = await database_sync_to_async(api.create_device)("acme", "desk-old")
    http = Http(secret)
    real = RealDevice(token, ping=False)
    try:
        await real.connect(core_node.ws)
        assert real.heartbeat == 30
        await asyncio.sleep(3 * GROUP_EXPIRY)  # the connection outlives its group's expiry
        assert (await http.submit(core_node, "desk-old")).status_code == 201
        assert await real.frame("wake", timeout=10) == {"type": "wake"}
    finally:
        await real.close()
        await http.close()
        await nodes_done_with_sockets()
