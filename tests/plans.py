"""What a statement reads under the plan a deployment's connections give it.

A deployment prepares the job path's statements and has PostgreSQL plan each once, without its
parameters' values (``plan_cache_mode = force_generic_plan``, docs/INSTALL.md). A test or a
benchmark that wants to know what such a statement reads runs it the same way:
:func:`generic_plan_buffers` prepares it with its parameters' types and runs it under EXPLAIN
ANALYZE in a transaction of its own (a savepoint inside the caller's), rolled back: whatever the
statement writes is undone.
"""

from __future__ import annotations

import uuid
from typing import Any

from django.db import connection, transaction


def _type(value: Any) -> str:
    """The SQL type of a parameter's Python value (an enum's by its base type)."""
    for python, sql in ((bool, "boolean"), (int, "bigint"), (str, "text"), (uuid.UUID, "uuid")):
        if isinstance(value, python):
            return sql
    raise TypeError(f"no SQL type for {value!r}")


def generic_plan_buffers(sql: str, params: list[Any]) -> int:
    """The shared buffers ``sql`` (``%s`` placeholders, ``%%`` for a percent sign) touches when
    it runs under its generic plan (PostgreSQL)."""
    pieces = sql.split("%s")
    if len(pieces) != len(params) + 1:
        raise ValueError(f"{len(pieces) - 1} placeholders for {len(params)} parameters")
    numbered = "".join(f"{piece}${n}" for n, piece in enumerate(pieces[:-1], 1)) + pieces[-1]
    types = ", ".join(_type(value) for value in params)
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("SET LOCAL plan_cache_mode = force_generic_plan")
            cursor.execute(f"PREPARE generic_read ({types}) AS {numbered.replace('%%', '%')}")
            arguments = ", ".join(["%s"] * len(params))
            cursor.execute(
                f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) EXECUTE generic_read ({arguments})",
                params,
            )
            plan = cursor.fetchone()[0][0]["Plan"]
            transaction.set_rollback(True)
    finally:  # a prepared statement outlives the transaction that made it
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1 FROM pg_prepared_statements WHERE name = 'generic_read'")
            if cursor.fetchone():
                cursor.execute("DEALLOCATE generic_read")
    return plan["Shared Hit Blocks"] + plan["Shared Read Blocks"]
