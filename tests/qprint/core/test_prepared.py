"""Prepared queries (qprint.core.prepared): compiled once, they answer what the queryset they
were built from answers, for every set of values, and never keep a value that may change."""

import threading
import uuid
import zoneinfo
from contextlib import contextmanager

import pytest
from django.db import DEFAULT_DB_ALIAS, DataError, connection, connections
from django.db.models import CharField, IntegerField, OuterRef, Subquery
from django.test import override_settings

from qprint import api
from qprint.core import prepared
from qprint.core.prepared import Param, PreparedInsert, PreparedQuery
from qprint.domain import credentials
from qprint.models import Device, EventSource, PrintJob, PrintJobEvent
from tests.qprint.helpers import connect, cursors_seen, make_device, submit

pytestmark = pytest.mark.django_db(transaction=True)


def _next_job():
    return Subquery(PrintJob.objects.filter(device_id=OuterRef("pk")).claimable().values("id")[:1])


DEVICES = PreparedQuery(
    lambda: (
        Device.objects.with_liveness()
        .annotate(next_job_id=_next_job())
        .filter(tenant=Param("tenant", CharField()), pk__gte=Param("from_pk", IntegerField()))
        .only("id", "name", "settings", "connection_id")
        .order_by("pk")
    )
)


def test_a_prepared_query_gives_what_its_queryset_gives_for_each_set_of_values():
    first, second = make_device(name="a").device, make_device(name="b").device
    make_device(tenant="other", name="c")
    connect(second)
    Device.objects.filter(pk=first.pk).update(settings={"copies": 2})
    job = submit(second)
    for tenant, from_pk in (("acme", 0), ("acme", second.pk), ("other", 0), ("none", 0)):
        expected = list(
            Device.objects.with_liveness()
            .annotate(next_job_id=_next_job())
            .filter(tenant=tenant, pk__gte=from_pk)
            .only("id", "name", "settings", "connection_id")
            .order_by("pk")
        )
        got = DEVICES.all(tenant=tenant, from_pk=from_pk)
        assert [d.pk for d in got] == [d.pk for d in expected]
        for mine, theirs in zip(got, expected, strict=True):
            assert (mine.name, mine.settings, mine.connection_id) == (
                theirs.name,
                theirs.settings,
                theirs.connection_id,
            )
            assert (mine.connection_live, mine.next_job_id) == (
                theirs.connection_live,
                theirs.next_job_id,
            )
            assert mine.get_deferred_fields() == theirs.get_deferred_fields()
            assert not mine._state.adding and mine._state.db == "default"
    assert DEVICES.all(tenant="acme", from_pk=second.pk)[0].next_job_id == job.pk
    assert DEVICES.all(tenant="acme", from_pk=0)[0].settings == {"copies": 2}  # JSON converted


def test_a_missing_value_is_an_error_not_a_null():
    with pytest.raises(TypeError, match="from_pk"):
        DEVICES.all(tenant="acme")


def test_a_rotated_token_is_not_found_by_the_compiled_lookup():
    made = make_device()
    assert credentials.device_for_token(made.token).pk == made.device.pk
    rotated = api.rotate_device_token(made.device)
    assert credentials.device_for_token(made.token) is None
    assert credentials.device_for_token(rotated).pk == made.device.pk
    assert credentials.device_with_token_hash(made.device.pk, made.device.token_hash) is None


#: Every column a call gives is a placeholder; ``source`` is a constant of the build.
_EVENT_COLUMNS = ("event_id", "job_id", "device_id", "type", "message", "detail", "fingerprint")
EVENT_INSERT = PreparedInsert(
    lambda: PrintJobEvent(
        source=EventSource.SERVER,
        **{name: Param(name, PrintJobEvent._meta.get_field(name)) for name in _EVENT_COLUMNS},
    ),
    returning=("id",),
)


def test_a_prepared_insert_writes_each_calls_values():
    made = make_device()
    job = submit(made.device)
    written = []
    for n, detail in enumerate(({"copies": 2}, {})):
        values = {
            "event_id": uuid.uuid4(),
            "job_id": job.pk,
            "device_id": made.device.pk if n == 0 else None,
            "type": f"NOTE{n}",
            "message": f"message {n}",
            "detail": detail,
            "fingerprint": str(n) * 64,
        }
        [(pk,)] = prepared.fetch(*EVENT_INSERT.statement(**values))
        written.append((pk, values))
    for pk, values in written:
        event = PrintJobEvent.objects.get(pk=pk)
        assert event.source == EventSource.SERVER and event.recorded_at is not None
        assert {name: getattr(event, name) for name in _EVENT_COLUMNS} == values


def test_a_prepared_insert_refuses_a_callable_default_it_would_freeze():
    frozen = PreparedInsert(lambda: PrintJobEvent(job_id=Param("job_id", IntegerField())))
    with pytest.raises(TypeError, match="event_id"):  # uuid.uuid4, once for every call
        frozen.statement(job_id=1)


@contextmanager
def _database_time_zone(name):
    """The connection's ``TIME_ZONE`` (the session's time zone) set to ``name``, as a database
    whose timestamps are read in a zone of its own is configured."""
    # The wrapper itself: ``connection`` is a proxy, and the cached time zones are the wrapper's.
    wrapper = connections[DEFAULT_DB_ALIAS]
    previous = wrapper.settings_dict["TIME_ZONE"]

    def apply(value):
        wrapper.settings_dict["TIME_ZONE"] = value
        for cached in ("timezone", "timezone_name"):
            wrapper.__dict__.pop(cached, None)
        wrapper.ensure_timezone()

    apply(name)
    try:
        yield
    finally:
        apply(previous)


def _timestamps_read_both_ways(job):
    columns = ("created_at", "expires_at")
    [row] = prepared.fetch(
        f"SELECT {', '.join(columns)} FROM {PrintJob._meta.db_table} WHERE id = %s", [job.pk]
    )
    by_orm = PrintJob.objects.values_list(*columns).get(pk=job.pk)
    return row, by_orm


@pytest.mark.services
@pytest.mark.parametrize(
    "use_tz, database_zone",
    [(True, None), (True, "Europe/Paris"), (False, None)],
    ids=["utc", "database-zone", "naive"],
)
def test_a_timestamp_fetched_is_the_one_the_orm_reads(use_tz, database_zone):
    """``fetch`` parses timestamps with psycopg's own loader: each value, and its time zone,
    must be what Django's loader gives on the same connection."""
    job = submit(make_device().device)
    with override_settings(USE_TZ=use_tz), _database_time_zone(database_zone):
        row, by_orm = _timestamps_read_both_ways(job)
    assert row == by_orm and all(value is not None for value in row)
    for mine, theirs in zip(row, by_orm, strict=True):
        assert mine.tzinfo == theirs.tzinfo and mine.utcoffset() == theirs.utcoffset()
        assert mine.isoformat() == theirs.isoformat()
    if not use_tz:
        assert row[0].tzinfo is None
    elif database_zone:
        assert row[0].tzinfo == zoneinfo.ZoneInfo(database_zone)
    else:
        assert row[0].tzinfo is connection.timezone


_TYPED = "SELECT %s::int + 1, %s::text, now(), '{\"a\": 1}'::jsonb, %s::bytea"
_OTHER = "SELECT %s::bigint * 2, %s::uuid, %s::boolean"


@pytest.mark.services
def test_statements_taking_turns_on_a_connection_each_read_their_own_values():
    """Each statement keeps its cursor, and with it the loaders of its columns and the dumpers of
    its parameters: statements taking turns, values of other types (None) and a statement that
    failed between them change nothing that is read."""
    for n in range(5):
        text = None if n % 2 else f"text {n}"
        [(number, got_text, now, document, data)] = prepared.fetch(
            _TYPED, [n, text, bytes([n]) * 3]
        )
        # jsonb as its text: Django's JSONField decodes it.
        assert (number, got_text, document, data) == (n + 1, text, '{"a": 1}', bytes([n]) * 3)
        assert now.tzinfo is not None
        token = uuid.uuid4()
        assert prepared.fetch(_OTHER, [n, token, n % 2 == 0]) == [(2 * n, token, n % 2 == 0)]
        with pytest.raises(DataError):
            prepared.fetch("SELECT 1 / %s::int", [0])
    assert prepared.fetch("SELECT 1 / %s::int", [1]) == [(1,)]


@pytest.mark.services
def test_a_statement_an_execute_wrapper_rewrites_runs_as_rewritten():
    """An execute wrapper may change the text it hands on (a comment naming the request, say):
    that text runs, on the cursor of the statement ``fetch`` was given."""

    def rewrite(execute, sql, params, many, context):
        return execute(sql.replace("+ 1", "+ 2"), params, many, context)

    assert prepared.fetch("SELECT %s::int + 1", [1]) == [(2,)]
    with connection.execute_wrapper(rewrite):
        assert prepared.fetch("SELECT %s::int + 1", [1]) == [(3,)]
        assert prepared.fetch("SELECT %s::int + 1", [1]) == [(3,)]
    assert prepared.fetch("SELECT %s::int + 1", [1]) == [(2,)]


@pytest.mark.services
def test_a_kept_cursor_holds_no_result_between_statements():
    """A document read is the caller's: its cursor, kept for the statement's next call, does not
    keep libpq's copy of it meanwhile."""
    document = b"%PDF" + b"x" * 1_000_000
    with cursors_seen() as seen:
        assert prepared.fetch("SELECT %s::bytea", [document]) == [(document,)]
        assert prepared.fetch("SELECT %s::bytea", [document]) == [(document,)]
    first, second = seen
    assert first is second and not first.closed
    assert first.pgresult is None or first.pgresult.pgresult_ptr is None


@pytest.mark.services
def test_a_new_connection_runs_a_statement_on_a_new_cursor():
    statement = "SELECT pg_backend_pid(), %s::int"
    with cursors_seen() as seen:
        [(before, _)] = prepared.fetch(statement, [1])
        connection.close()
        [(after, one)] = prepared.fetch(statement, [1])
    assert before != after and one == 1
    assert seen[0] is not seen[1] and seen[1].connection is connection.connection


@pytest.mark.services
def test_the_cursors_kept_on_a_connection_are_bounded():
    """Past ``MAX_KEPT_CURSORS`` statements, the cursor made first is closed; its statement gets
    a new one when it comes back."""
    count = prepared.MAX_KEPT_CURSORS + 1
    with cursors_seen() as seen:
        for n in range(count):
            assert prepared.fetch(f"SELECT %s::int + {n}", [1]) == [(1 + n,)]
        assert prepared.fetch("SELECT %s::int + 0", [2]) == [(2,)]
    kept = seen[-prepared.MAX_KEPT_CURSORS :]
    assert seen[0].closed and all(not cursor.closed for cursor in kept)
    assert seen[-1] is not seen[0]


@pytest.mark.services
def test_a_statement_read_again_in_another_time_zone_takes_it():
    """The statement's cursor was kept in UTC; the session's time zone changed since."""
    job = submit(make_device().device)
    utc, _ = _timestamps_read_both_ways(job)
    with _database_time_zone("Europe/Paris"):
        paris, by_orm = _timestamps_read_both_ways(job)
    assert utc[0].tzinfo is connection.timezone
    assert paris == by_orm and paris[0].tzinfo == zoneinfo.ZoneInfo("Europe/Paris")


@pytest.mark.services
def test_threads_running_the_same_statements_each_read_their_own_rows():
    """Each thread runs its statements on cursors of its own connection."""
    statement = "SELECT %s::int, pg_backend_pid()"
    errors = []

    def run(n):
        try:
            pids = set()
            for _ in range(200):
                [(got, pid)] = prepared.fetch(statement, [n])
                assert got == n
                assert prepared.fetch(_OTHER, [n, uuid.UUID(int=n), True])[0][0] == 2 * n
                pids.add(pid)
            assert len(pids) == 1
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(thread.is_alive() for thread in threads)
    assert errors == []
