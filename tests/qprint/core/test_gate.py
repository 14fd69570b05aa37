"""The claim gate's two forms agree: :func:`qprint.core.gate.refusal` in Python and
:func:`qprint.core.gate.open_sql`, which the claim's one statement evaluates on the row it locks.
Every combination of the inputs, on the test database (PostgreSQL in CI)."""

import itertools
from types import SimpleNamespace

import pytest
from django.db import connection

from qprint.core import gate

pytestmark = pytest.mark.django_db

COLUMNS = (
    "enabled",
    "connection_live",
    "connection_ready",
    "paused",
    "control_revision",
    "control_applied_revision",
    "settings_revision",
    "settings_applied_revision",
)


def combinations():
    """Each boolean input true, false and (the lease's judgement of a row without one) NULL; each
    pair of revisions equal and not."""
    flags = [True, False]
    for enabled, live, ready, paused, control, settings in itertools.product(
        flags, [True, False, None], flags, flags, flags, flags
    ):
        yield (enabled, live, ready, paused, 3, 3 if control else 2, 5, 5 if settings else 4)


def sql_literal(value) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "1=1" if value else "1=0"
    return str(int(value))


def test_the_sql_form_opens_exactly_when_the_python_form_gives_no_refusal():
    rows = list(combinations())
    selects = " UNION ALL ".join(
        "SELECT {n} AS n, {cols}".format(
            n=n,
            cols=", ".join(
                f"{sql_literal(value)} AS {name}" for name, value in zip(COLUMNS, row, strict=True)
            ),
        )
        for n, row in enumerate(rows)
    )
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT r.n, CASE WHEN {gate.open_sql('r')} THEN 1 ELSE 0 END"
            f" FROM ({selects}) AS r ORDER BY r.n"
        )
        opened = {n: bool(flag) for n, flag in cursor.fetchall()}
    assert len(opened) == len(rows) == 2 * 3 * 2**4
    for n, row in enumerate(rows):
        inputs = SimpleNamespace(**dict(zip(COLUMNS, row, strict=True)))
        inputs.connection_live = bool(inputs.connection_live)  # as DeviceState reads it
        assert opened[n] == gate.is_open(inputs), dict(zip(COLUMNS, row, strict=True))
    assert any(opened.values()) and not all(opened.values())
