"""The JSON submission's envelope: the body split around ``content_base64`` without parsing it
whole reads the same fields and document as parsing it would, and refuses what it must."""

from __future__ import annotations

import base64
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qprint.core.errors import Invalid
from qprint.views.http import RequestError
from qprint.views.uploads import decode_document, split_envelope

BUDGET = 4096

values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)
fields = st.dictionaries(
    st.text(max_size=10).filter(lambda k: k != "content_base64"), values, max_size=4
)


def read(body: bytes) -> tuple[dict, bytes]:
    envelope, span = split_envelope(body, BUDGET)
    parsed = json.loads(envelope)
    assert parsed.pop("content_base64") == ""
    return parsed, decode_document(body, span)


@settings(max_examples=200, deadline=None)
@given(
    fields=fields,
    document=st.binary(min_size=1, max_size=300),
    position=st.integers(min_value=0, max_value=4),
    ascii_only=st.booleans(),
    escape_slashes=st.booleans(),
    line_breaks=st.booleans(),
)
def test_the_split_reads_what_a_parse_reads(
    fields, document, position, ascii_only, escape_slashes, line_breaks
):
    encoded = (
        base64.encodebytes(document).decode()
        if line_breaks
        else (base64.b64encode(document).decode())
    )
    items = list(fields.items())
    items.insert(min(position, len(items)), ("content_base64", encoded))
    text = json.dumps(dict(items), ensure_ascii=ascii_only)
    if escape_slashes:
        text = text.replace("/", "\\/")  # as PHP's json_encode writes it
    body = text.encode()
    if len(body) - len(encoded) * 2 > BUDGET:
        return
    parsed, content = read(body)
    assert parsed == fields
    assert content == document


@pytest.mark.parametrize(
    ("body", "kind"),
    [
        (b"[" + b"[]," * 5000 + b"[]]", 413),  # the structure passes the budget: never parsed
        (b'{"options": "' + b"x" * 5000 + b'", "content_base64": "QQ=="}', 413),
        (b'{"a": ' + b"[" * 40 + b"]" * 40 + b"}", "too_deep"),
        (b'{"content_base64": "QQ\\"=="}', "invalid"),
        (b'{"content_base64": "QQ=="', "invalid_json"),
    ],
)
def test_what_the_split_refuses(body, kind):
    if kind == "invalid_json":
        envelope, _ = split_envelope(body, BUDGET)
        with pytest.raises(json.JSONDecodeError):
            json.loads(envelope)
        return
    with pytest.raises((RequestError, Invalid)) as refused:
        envelope, span = split_envelope(body, BUDGET)
        decode_document(body, span)
    if kind == 413:
        assert refused.value.status == 413
    else:
        assert refused.value.code == kind


def test_a_document_that_is_not_base64_is_refused():
    body = b'{"content_base64": "QQ=!"}'
    _, span = split_envelope(body, BUDGET)
    with pytest.raises(RequestError) as refused:
        decode_document(body, span)
    assert (refused.value.status, refused.value.code) == (422, "invalid")
