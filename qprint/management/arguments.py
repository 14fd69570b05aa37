"""What every qprint command does with its arguments before it calls the domain."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError

from qprint.core.text import storable


def refuse_unstorable(options: dict[str, Any], *, paths: tuple[str, ...] = ()) -> None:
    """:class:`CommandError` naming a text argument the database could not hold: a byte of the
    command line that is not UTF-8 reaches Python as a lone surrogate, and a NUL can be passed
    by a program. ``paths`` name file arguments, which the system reads as they are."""
    for name, value in options.items():
        if name not in paths and isinstance(value, str) and not storable(value):
            option = "--" + name.replace("_", "-")
            raise CommandError(
                f"{option}: {value!r} is not text the database can hold (a byte that is not "
                "UTF-8, or a NUL)."
            )
