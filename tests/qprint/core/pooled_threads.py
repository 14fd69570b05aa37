"""What a node's database threads do with Django's pool, seen from inside a process of the example
project (the pool on, as deployed): run by ``test_executor.py``.

    DATABASE_URL=postgres://... DATABASE_POOL=on python -m tests.qprint.core.pooled_threads

Prints one JSON object: the pool's checkouts (``requests_num``) and the server processes seen
for calls made back to back on one thread, whether the connection went back to the pool once the
thread had nothing to do, and the checkouts of ``HOLD_CALLS`` + 1 calls in a row.
"""

from __future__ import annotations

import asyncio
import json
import os

from tests.waiting import eventually


async def main() -> dict:
    from django.db import connection, connections

    from qprint.core import executor

    def backend_pid() -> int:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            return cursor.fetchone()[0]

    pool = connections["default"].pool
    threads = executor.DatabaseThreads("probe", threads=1)

    def checkouts() -> int:
        return pool.get_stats().get("requests_num", 0)

    before = checkouts()
    pids = [await threads.run(backend_pid) for _ in range(10)]
    back_to_back = checkouts() - before

    def all_in_the_pool() -> bool:
        stats = pool.get_stats()
        return stats["pool_available"] == stats["pool_size"]

    given_back = await eventually(all_in_the_pool, 10, "the idle thread's connection back")

    before = checkouts()
    for _ in range(executor.HOLD_CALLS + 1):
        await threads.run(backend_pid)
    held = checkouts() - before
    threads.shutdown()
    return {
        "back_to_back_checkouts": back_to_back,
        "backends": len(set(pids)),
        "given_back": given_back,
        "hold_calls_plus_one_checkouts": held,
        **await _cursors_through_the_pool(all_in_the_pool),
    }


async def _cursors_through_the_pool(all_in_the_pool) -> dict:
    """Which cursor ``qprint.core.prepared.fetch`` ran one statement on, from two sets of
    threads taking their connections from the pool in turn (each given back between calls):
    whether each server process (each pooled connection) ran it on one cursor, and whether a
    connection served both sets."""
    from qprint.core import executor, prepared
    from tests.qprint.helpers import cursors_seen

    def run_statement() -> tuple[int, object]:
        with cursors_seen() as seen:
            [(pid, _)] = prepared.fetch("SELECT pg_backend_pid(), %s::int", [1])
        return pid, seen[0]

    sets = {
        "a": executor.DatabaseThreads("a", threads=1),
        "b": executor.DatabaseThreads("b", threads=1),
    }
    by_backend: dict[int, list] = {}
    served: dict[int, set] = {}
    for name in "aabbabba":
        pid, cursor = await sets[name].run(run_statement)
        by_backend.setdefault(pid, []).append(cursor)
        served.setdefault(pid, set()).add(name)
        await eventually(all_in_the_pool, 10, "the connection back in the pool")
    for threads in sets.values():
        threads.shutdown()
    return {
        "one_cursor_per_backend": all(
            all(cursor is cursors[0] for cursor in cursors) for cursors in by_backend.values()
        ),
        "a_backend_served_both_sets": any(names == {"a", "b"} for names in served.values()),
    }


if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "example_project.settings")
    import django

    django.setup()
    print(json.dumps(asyncio.run(main())))
