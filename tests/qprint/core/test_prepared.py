"""Prepared queries (qprint.core.prepared): compiled once, they answer what the queryset they
were built from answers, for every set of values, and never keep a value that may change."""

import pytest
from django.db.models import CharField, IntegerField, OuterRef, Subquery

from qprint import api
from qprint.core.prepared import Param, PreparedQuery
from qprint.domain import credentials
from qprint.models import Device, PrintJob
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
