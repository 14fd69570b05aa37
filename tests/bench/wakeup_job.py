"""What a wakeup costs the two nodes it passes between, in one process: the message a node publishes
for a device (``qprint.realtime.publisher``'s, to the group ``qprint.device.<pk>``) sent with
``group_send`` on one instance of channels-redis's pub/sub layer (the publishing node's), and
taken with ``receive`` by another instance subscribed to the group (the node holding the device's
socket), through ``REDIS_URL``'s Redis. One wakeup is sent and received at a time: a pushed job's
one wakeup, without the rest of the job (``tests.bench.node_job`` runs the job on the in-memory
layer, without Redis).

What it measures is the Redis client's share (redis-py, under channels-redis): its commands'
packing, its replies' and messages' parsing. redis-py parses with hiredis when hiredis is
installed (a dependency of django-qprint, docs/INSTALL.md); ``BENCH_REDIS_PARSER=python`` runs
the same wakeups on redis-py's own parser, as a deployment without hiredis would.

    python -m tests.bench.wakeup_job [wakeups]                  # CPU per wakeup (both sides)
    python -m tests.bench.wakeup_job --instructions [wakeups]   # instructions per wakeup

``--instructions`` counts under ``valgrind --tool=callgrind`` as ``tests.bench.agent_job`` does:
Redis runs in its own process, outside the count.
"""

from __future__ import annotations

import os
import sys
import time

from qprint.core import event_loop
from tests.bench.machine import cpu_of_jobs, per_job_main

WARM_UP = 50
#: Which parser redis-py uses: ``hiredis`` (when installed, redis-py's own choice) or ``python``.
PARSER = os.environ.get("BENCH_REDIS_PARSER", "hiredis")

if PARSER == "python":
    # redis-py chooses its parser when it is imported: a missing hiredis makes it use its own.
    sys.modules["hiredis"] = None  # type: ignore[assignment]


def _layer():
    from channels_redis.pubsub import RedisPubSubChannelLayer

    # As the example project configures it (example_project/settings.py).
    address = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
    return RedisPubSubChannelLayer(hosts=[{"address": address, "socket_timeout": None}])


async def _wakeups(count: int) -> float:
    """CPU seconds of ``count`` wakeups, after :data:`WARM_UP` of them."""
    import redis.utils

    if PARSER == "hiredis" and not redis.utils.HIREDIS_AVAILABLE:
        sys.exit("hiredis is not installed (or older than redis-py accepts)")
    publishing, receiving = _layer(), _layer()
    group = "qprint.device.12345"
    channel = await receiving.new_channel("qprint.node.")
    await receiving.group_add(group, channel)

    async def wakeup() -> None:
        message = {"type": "qprint.wake", "tenant": "default", "device_id": 12345,
                   "sent_at": time.time(), "queued": True}  # fmt: skip
        await publishing.group_send(group, message)
        received = await receiving.receive(channel)
        assert received["device_id"] == 12345

    try:
        return await cpu_of_jobs(wakeup, count, WARM_UP)
    finally:
        await receiving.group_discard(group, channel)
        await publishing.flush()
        await receiving.flush()


def main() -> None:
    per_job_main(
        "tests.bench.wakeup_job",
        __doc__.split("\n\n")[0],
        lambda wakeups: event_loop.run(_wakeups(wakeups)),  # the nodes' loop (qprint-daphne)
    )


if __name__ == "__main__":
    main()
