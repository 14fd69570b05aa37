"""What text a database stores: one predicate, free of Django, for the inputs of every transport
(:mod:`qprint.core.inputs`) and for the CloudPRNT wire (:mod:`qprint.core.cloudprnt_protocol`).
PostgreSQL refuses a NUL character in text, and UTF-8 has no lone surrogate (a JSON
``"\\ud800"``)."""

import re

_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def storable(value: str) -> bool:
    """Whether the database can store ``value``: no NUL character, no lone surrogate."""
    return _UNSTORABLE.search(value) is None
