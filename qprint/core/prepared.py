"""The statements every device request makes, built with the ORM once per process.

Building and compiling a queryset costs a node more CPU than PostgreSQL spends answering it: 0.3 to
0.5 ms for the token lookup or the claim's lock, against 0.1 ms for the round trip
(docs/PERFORMANCE.md, "Prepared queries"). A :class:`PreparedQuery` is an ordinary queryset written
once with :class:`Param` placeholders where each call's values go. It is compiled by Django the
first time it runs on a database alias; every call then binds its values in their place (through
each placeholder's field, as the ORM prepares a value) and turns the rows into model instances and
annotations as the queryset itself would. The SQL is Django's own, so the predicates stay the
queryset methods that own them.

A value that may change while the process runs (a setting, a time window) must be a ``Param``, never
a constant of the build: the compiled statement keeps its constants for the life of the process.

On PostgreSQL these statements, and the raw statements of the job path (the claim, the event, the
socket's reads and renewals), are bound by the server (:func:`fetch`), so psycopg can run them as
**server-side prepared statements**: PostgreSQL then parses and plans each once per connection,
not at every call. Planning was most of PostgreSQL's time per job (docs/PERFORMANCE.md, "Prepared
statements"). psycopg's own switch decides: ``OPTIONS["prepare_threshold"]`` in the database
settings (a statement is prepared on a connection after that many runs there). Django turns it off
by default (``None``) for PgBouncer in transaction mode before 1.21, which cannot keep a
connection's prepared statements; the example project turns it on with its pool.
"""

from __future__ import annotations

import datetime
import functools
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.db import connections
from django.db.models import Expression, Field, Model, QuerySet


@dataclass(frozen=True)
class _Slot:
    """Where a call's value goes in the compiled parameters."""

    name: str
    field: Field


class Param(Expression):
    """A placeholder for the value named ``name``, of the type of ``output_field``."""

    def __init__(self, name: str, output_field: Field):
        super().__init__(output_field=output_field)
        self.name = name

    def as_sql(self, compiler, connection):
        return "%s", [_Slot(self.name, self.output_field)]

    def __repr__(self) -> str:
        return f"Param({self.name!r})"


class _Compiled:
    """One queryset compiled for one database alias."""

    def __init__(self, queryset: QuerySet, using: str):
        compiler = queryset.query.get_compiler(using=using)
        self.sql, params = compiler.as_sql()
        self.params = tuple(params)
        self.names = {p.name for p in self.params if isinstance(p, _Slot)}
        select, klass_info = compiler.select, compiler.klass_info
        annotations = compiler.annotation_col_map
        self.model: type[Model] = klass_info["model"]
        fields = klass_info["select_fields"]
        self.start, self.end = fields[0], fields[-1] + 1
        self.attnames = [column[0].target.attname for column in select[self.start : self.end]]
        self.annotations = list((annotations or {}).items())
        self.converters = compiler.get_converters([column[0] for column in select])
        self.compiler = compiler

    def bind(self, connection, values: dict[str, Any]) -> list[Any]:
        return _bind(self.params, self.names, connection, values)

    def instances(self, using: str, rows: list) -> list[Model]:
        if self.converters:
            rows = list(self.compiler.apply_converters(rows, self.converters))
        made = []
        for row in rows:
            obj = self.model.from_db(using, self.attnames, row[self.start : self.end])
            for name, position in self.annotations:
                setattr(obj, name, row[position])
            made.append(obj)
        return made


def _bind(params: tuple, names: set[str], connection, values: dict[str, Any]) -> list[Any]:
    """The compiled parameters with each :class:`Param`'s slot holding its value of ``values``,
    prepared for the database as the ORM prepares a value (through the placeholder's field)."""
    missing = names - values.keys()
    if missing:
        raise TypeError(f"values missing for {sorted(missing)}")
    return [
        p.field.get_db_prep_value(values[p.name], connection, prepared=False)
        if isinstance(p, _Slot)
        else p
        for p in params
    ]


class PreparedQuery:
    """A queryset, made by ``build()`` with :class:`Param` placeholders, compiled once per alias."""

    def __init__(self, build: Callable[[], QuerySet], using: str = "default"):
        self._build = build
        self.using = using
        self._compiled: dict[str, _Compiled] = {}
        self._lock = threading.Lock()

    def _for(self, using: str) -> _Compiled:
        compiled = self._compiled.get(using)
        if compiled is None:
            with self._lock:
                compiled = self._compiled.get(using)
                if compiled is None:
                    compiled = self._compiled[using] = _Compiled(self._build(), using)
        return compiled

    def all(self, **values: Any) -> list[Model]:
        """The model instances (with their annotations) the queryset would give for ``values``."""
        compiled = self._for(self.using)
        connection = connections[self.using]
        rows = fetch(compiled.sql, compiled.bind(connection, values), using=self.using)
        return compiled.instances(self.using, rows)

    def first(self, **values: Any) -> Model | None:
        """The first instance, or ``None`` (build the queryset sliced ``[:1]``)."""
        found = self.all(**values)
        return found[0] if found else None

    def statement(self, **values: Any) -> tuple[str, list[Any]]:
        """The compiled SQL (``%s`` placeholders) and its parameters for ``values``: to run as
        the first CTE of a larger statement (``WITH rows AS (...) SELECT rows.*, ...``), whose
        rows :meth:`instances` then reads."""
        compiled = self._for(self.using)
        return compiled.sql, compiled.bind(connections[self.using], values)

    def instances(self, rows: list) -> list[Model]:
        """The instances of ``rows`` whose first columns are this queryset's select list, in its
        order (the columns after them are left to the caller)."""
        return self._for(self.using).instances(self.using, rows)


class PreparedInsert:
    """The INSERT of one row of a model, compiled by Django once per process: ``build()`` makes an
    unsaved instance whose values are :class:`Param` placeholders (or expressions of them; a field
    it leaves alone takes its default, compiled as a constant, so a default that changes, like a
    fresh UUID, must be a ``Param``). ``returning``: the columns the statement returns;
    ``ignore_conflicts``: ``ON CONFLICT DO NOTHING`` (then no row when a unique key is taken)."""

    def __init__(
        self,
        build: Callable[[], Model],
        *,
        returning: tuple[str, ...] = (),
        ignore_conflicts: bool = False,
        using: str = "default",
    ):
        self._build = build
        self.returning = returning
        self.ignore_conflicts = ignore_conflicts
        self.using = using
        self._compiled: tuple[str, tuple, set[str]] | None = None
        self._lock = threading.Lock()

    def _compile(self) -> tuple[str, tuple, set[str]]:
        from django.db.models.constants import OnConflict
        from django.db.models.sql import InsertQuery

        instance = self._build()
        model = type(instance)
        on_conflict = OnConflict.IGNORE if self.ignore_conflicts else None
        query = InsertQuery(model, on_conflict=on_conflict)
        fields = [f for f in model._meta.local_concrete_fields if not f.generated]
        if instance.pk is None:  # the database numbers it, as Model.save() leaves it
            fields = [f for f in fields if f is not model._meta.auto_field]
        for field in fields:
            if (
                field.has_default()
                and callable(field.default)
                and not isinstance(getattr(instance, field.attname), Expression)
            ):
                # Compiled once, its value would be the first call's for the life of the process.
                raise TypeError(f"{field} has a callable default: give it a Param")
        query.insert_values(fields, [instance])
        compiler = query.get_compiler(using=self.using)
        compiler.returning_fields = [model._meta.get_field(name) for name in self.returning]
        [(sql, params)] = compiler.as_sql()
        return sql, tuple(params), {p.name for p in params if isinstance(p, _Slot)}

    def statement(self, **values: Any) -> tuple[str, list[Any]]:
        """The SQL (``%s`` placeholders) and its parameters for ``values``: to run with
        :func:`fetch`, alone or as a CTE of a larger statement."""
        compiled = self._compiled
        if compiled is None:
            with self._lock:
                compiled = self._compiled = self._compiled or self._compile()
        sql, params, names = compiled
        return sql, _bind(params, names, connections[self.using], values)


_NAMED = re.compile(r"%\((\w+)\)s")


def positional(sql: str) -> tuple[str, list[str]]:
    """``sql`` with its named placeholders (``%(name)s``) made positional (``%s``), and their
    names in order (a name used twice is listed twice): for a statement whose values are named
    after a compiled queryset's positional ones, as the first CTE of a larger statement."""
    return _NAMED.sub("%s", sql), _NAMED.findall(sql)


def timestamptz_loader(connection, session_zone: datetime.tzinfo) -> type:
    """The loader of ``timestamptz`` text for :func:`fetch` on ``connection`` (Django's), whose
    session is in ``session_zone`` (psycopg's reading of it), giving what Django's loader gives
    there: psycopg's own (C in its binary build) where its result already carries the time zone
    Django gives a value (the session's time zone is the one Django set on the connection: UTC,
    the usual case), else psycopg's with that time zone put in its result, as Django's does
    (``None``, naive, when ``USE_TZ`` is off). Registered on :func:`fetch`'s cursors only: the
    ORM's own reads keep Django's loader."""
    timezone = connection.timezone
    if session_zone is timezone:
        return _psycopg_loader()
    return _in_time_zone(timezone)


@functools.cache
def _psycopg_loader() -> type:
    from psycopg import adapters
    from psycopg.pq import Format

    return adapters.get_loader(adapters.types["timestamptz"].oid, Format.TEXT)


@functools.cache
def _in_time_zone(timezone: datetime.tzinfo | None) -> type:
    from psycopg.adapt import Loader

    default = _psycopg_loader()

    class TimestamptzLoader(Loader):
        def __init__(self, oid: int, context: Any = None):
            super().__init__(oid, context)
            self._parse = default(oid, context).load

        def load(self, data: Any) -> datetime.datetime:
            return self._parse(data).replace(tzinfo=timezone)

    return TimestamptzLoader


@functools.lru_cache(maxsize=1024)
def _encoded(sql: str) -> bytes:
    """``sql`` as the bytes psycopg sends (Django's connections speak UTF-8), the same object at
    every call of the same statement: psycopg encodes a ``str`` at every call, then hashes the
    new bytes to find its parsed form and its prepared statement."""
    return sql.encode()


def fetch(sql: str, params: Any = (), *, using: str = "default") -> list[tuple]:
    """The rows of ``sql`` (``%s`` or ``%(name)s`` placeholders): on PostgreSQL bound by the
    server, and prepared once it ran ``prepare_threshold`` times on the connection (a parameter
    whose type the statement does not fix needs a cast), else Django's cursor. Seen by Django's
    execute wrappers and logged as Django's cursor logs a statement (``DEBUG``,
    ``CaptureQueriesContext``)."""
    connection = connections[using]
    if connection.vendor != "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            return cursor.fetchall() if cursor.description else []
    from psycopg.pq import ExecStatus  # PostgreSQL only (this path)

    connection.ensure_connection()
    started = time.monotonic()
    with connection.wrap_database_errors:
        cursor = _kept_cursor(connection, _encoded(sql))

        def execute(sql, params, many, context):
            # Django's cursor binds on the client: PostgreSQL would plan it at every call. The
            # text is the one the wrappers hand on (one may add a comment, say).
            cursor.execute(_encoded(sql), params)

        # Django's execute wrappers (connection.execute_wrapper) see it as any statement.
        for wrapper in reversed(connection.execute_wrappers):
            execute = functools.partial(wrapper, execute)
        execute(sql, params, False, {"connection": connection, "cursor": cursor})
        # Whether the statement returned rows, from the result itself: ``description`` would
        # build a Column object per column at every call.
        result = cursor.pgresult
        rows = []
        if result is not None and result.status == ExecStatus.TUPLES_OK:
            rows = cursor.fetchall()
            # The rows are Python's now: libpq's copy (a document, say) is not kept until the
            # cursor's next statement.
            result.clear()
    if connection.queries_logged:
        connection.queries_log.append({"sql": sql, "time": f"{time.monotonic() - started:.3f}"})
    return rows


#: The cursors :func:`fetch` keeps per connection (one per statement), at most.
MAX_KEPT_CURSORS = 64

#: The attribute of a psycopg connection holding what :func:`_kept_cursor` keeps for it: its
#: session's time zone and the ``timestamptz`` loader registered on the cursors, and the cursors
#: by statement. On the connection, so that they go with it through the pool from one thread to
#: another, and go away with it.
_KEPT = "_qprint_kept_cursors"


def _kept_cursor(connection, query: bytes) -> Any:
    """The cursor that runs ``query`` (:func:`_encoded`'s bytes) for :func:`fetch` on
    ``connection`` (Django's, connected): one kept per statement and psycopg connection.

    A new cursor per statement copied the connection's adapters to register its loader, and
    looked up and built the loaders of the result's columns and the dumpers of the parameters
    again at every call. psycopg keeps a cursor's adapters while it runs the same query object
    again, so a statement on its own cursor finds them built (docs/PERFORMANCE.md, "A cursor
    kept per statement"). A connection serves one thread at a time (Django's connections are
    per thread, and the pool hands one to one thread), and so do its cursors. They hold no
    result between calls (:func:`fetch` clears it); a change of the session's time zone or of
    Django's starts new ones, and past :data:`MAX_KEPT_CURSORS` the one made first is closed."""
    import psycopg  # PostgreSQL only (this path)

    raw = connection.connection
    # psycopg's loader reads the session's time zone once, when a cursor first meets the type.
    zone = raw.info.timezone
    loader = timestamptz_loader(connection, zone)
    kept = getattr(raw, _KEPT, None)
    if kept is None or kept[0] is not zone or kept[1] is not loader:
        kept = (zone, loader, {})
        setattr(raw, _KEPT, kept)
    cursors = kept[2]
    cursor = cursors.get(query)
    if cursor is None:
        if len(cursors) >= MAX_KEPT_CURSORS:
            cursors.pop(next(iter(cursors))).close()
        cursor = cursors[query] = psycopg.Cursor(raw)
        cursor.adapters.register_loader("timestamptz", loader)
    return cursor
