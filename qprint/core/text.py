"""What text a database stores, and what text fits on one line: predicates free of Django, for
the inputs of every transport (:mod:`qprint.core.inputs`), the CloudPRNT wire
(:mod:`qprint.core.cloudprnt_protocol`) and webhook URLs. PostgreSQL refuses a NUL character in
text, and UTF-8 has no lone surrogate (a JSON ``"\\ud800"``)."""

import re

_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
_CONTROL = re.compile("[\x00-\x1f\x7f]")


def storable(value: str) -> bool:
    """Whether the database can store ``value``: no NUL character, no lone surrogate."""
    return _UNSTORABLE.search(value) is None


def has_control_character(value: str) -> bool:
    """Whether ``value`` holds a control character (a line break, a tab, a NUL...)."""
    return _CONTROL.search(value) is not None
