"""One log line per state change on the device socket, and nothing per idle ping."""

from __future__ import annotations

import logging

from tests.qprint.realtime.conftest import adb, row
from tests.waiting import wait_until


async def test_idle_ping_logs_nothing_while_open_and_ready_log_once(
    device_and_token, sockets, caplog
):
    device, token = device_and_token
    caplog.set_level(logging.DEBUG)
    s = sockets(token)
    await s.hello_and_ready()
    await adb(lambda: wait_until(lambda: row(device.pk).connection_ready, 5, message="ready"))
    events = [r.getMessage().split(" ")[0] for r in caplog.records if r.name.startswith("qprint")]
    assert events.count("socket_open") == 1 and events.count("socket_ready") == 1

    caplog.clear()
    for _ in range(3):
        before = (await adb(row, device.pk)).connection_lease_expires_at
        await s.send({"type": "ping"})
        await adb(
            lambda before=before: wait_until(
                lambda: row(device.pk).connection_lease_expires_at > before, 5, message="renewed"
            )
        )
    assert [r for r in caplog.records if r.name.startswith(("qprint", "qcluster"))] == []
