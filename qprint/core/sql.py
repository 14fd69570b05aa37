"""The SQL text of qprint's raw statements that differs between PostgreSQL and SQLite, in one place.

The connection record (:mod:`qprint.domain.connection`) and command delivery
(:mod:`qprint.domain.commands`) write with raw ``UPDATE ... RETURNING`` statements so each guarded
write is one round trip (SQLite has ``RETURNING`` since 3.35). What they need of the vendor:

- :func:`now`: the database clock, as SQL;
- :func:`seconds_from_now` / :func:`seconds_ago`: ``now`` plus / minus a number of seconds given
  as a parameter (or, for :func:`seconds_from_now`, as an SQL expression);
- :func:`json_number`: a key of a JSON column when it holds a number, else NULL;
- :func:`true` / :func:`false`: boolean literals;
- :func:`uuid_param`: how a UUID is passed (uuid on PostgreSQL, 32 hex characters on SQLite, as
  Django stores it there);
- :func:`json_value`: a JSON column as read back (text on SQLite).

:class:`Literal` is for the ORM's statements: a fixed value written into their text.

The SQL copies of the queryset predicates, which need the tables, are in
:mod:`qprint.models.raw`.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from django.db import connection as db
from django.db.models import Value


def postgresql() -> bool:
    return db.vendor == "postgresql"


def now() -> str:
    return "now()" if postgresql() else "strftime('%%Y-%%m-%%d %%H:%%M:%%f', 'now')"


def seconds_from_now(seconds: str = "%s") -> str:
    """``now()`` plus ``seconds`` seconds: one parameter, or the SQL expression given."""
    if postgresql():
        return f"now() + make_interval(secs => {seconds})"
    return f"strftime('%%Y-%%m-%%d %%H:%%M:%%f', 'now', '+' || ({seconds}) || ' seconds')"


def seconds_ago() -> str:
    """``now()`` minus ``%s`` seconds (one parameter)."""
    if postgresql():
        return "now() - make_interval(secs => %s)"
    return "strftime('%%Y-%%m-%%d %%H:%%M:%%f', 'now', '-' || %s || ' seconds')"


def json_number(column: str, key: str) -> str:
    """The value of ``key`` in the JSON object ``column`` when it is a number (not a boolean, a
    string or absent: NULL then). ``key`` is a constant of the caller, never client input."""
    if postgresql():
        return (
            f"(CASE WHEN jsonb_typeof({column} -> '{key}') = 'number' "
            f"THEN ({column} ->> '{key}')::double precision END)"
        )
    return (
        f"(CASE WHEN json_type({column}, '$.{key}') IN ('integer', 'real') "
        f"THEN json_extract({column}, '$.{key}') END)"
    )


def true() -> str:
    return "true" if postgresql() else "1"


def false() -> str:
    return "false" if postgresql() else "0"


def uuid_param(value: uuid.UUID) -> Any:
    return value if postgresql() else value.hex


def json_value(value: Any) -> Any:
    if isinstance(value, (str, bytes)):
        return json.loads(value)
    return value


class Literal(Value):
    """A constant written into the statement's text instead of bound as a parameter.

    The job path's statements are prepared and planned once without their parameters' values (a
    generic plan, docs/INSTALL.md). A status bound as a parameter cannot be matched to a partial
    index's predicate (``WHERE status = '...'``) nor weighed by the column's statistics: the
    plan then reads every job of a device to find the one or two in that status, its whole
    history (docs/PERFORMANCE.md, "A device's history"). For the querysets' fixed statuses
    (:mod:`qprint.models.querysets`), never for input."""

    def as_sql(self, compiler, connection):
        text = str(self.value).replace("'", "''").replace("%", "%%")
        return f"'{text}'", []
