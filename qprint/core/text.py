"""What text a database stores, what text fits on one line, and what text is a number: predicates
free of Django, for the inputs of every transport (:mod:`qprint.core.inputs`), the CloudPRNT wire
(:mod:`qprint.core.cloudprnt_protocol`), webhook URLs, and the agent (which takes this module).
PostgreSQL refuses a NUL character in text, and UTF-8 has no lone surrogate (a JSON
``"\\ud800"``)."""

import re

_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
_CONTROL = re.compile("[\x00-\x1f\x7f]")


def storable(value: str) -> bool:
    """Whether the database can store ``value``: no NUL character, no lone surrogate."""
    return _UNSTORABLE.search(value) is None


def has_control_character(value: str) -> bool:
    """Whether ``value`` holds a control character (a line break, a tab, a NUL...)."""
    return _CONTROL.search(value) is not None


def digits(value: str) -> bool:
    """Whether ``value`` is a whole number written in ASCII digits only (at least one): what a
    header, a query or a wire field may carry. ``str.isdigit`` alone also takes "²" and other
    digits that ``int`` cannot read."""
    return value.isascii() and value.isdigit()
