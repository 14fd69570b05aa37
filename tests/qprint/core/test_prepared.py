"""Prepared queries (qprint.core.prepared): compiled once, they answer what the queryset they
were built from answers, for every set of values, and never keep a value that may change."""

import uuid
import zoneinfo
from contextlib import contextmanager

import pytest
from django.db import connection
from django.db.models import CharField, IntegerField, OuterRef, Subquery
from django.test import override_settings

from qprint import api
from qprint.core import prepared
from qprint.core.prepared import Param, PreparedInsert, PreparedQuery
from qprint.domain import credentials
from qprint.models import Device, EventSource, PrintJob, PrintJobEvent
from tests.qprint.helpers import connect, make_device, submit

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
    previous = connection.settings_dict["TIME_ZONE"]

    def apply(value):
        connection.settings_dict["TIME_ZONE"] = value
        for cached in ("timezone", "timezone_name"):
            connection.__dict__.pop(cached, None)
        connection.ensure_timezone()

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
