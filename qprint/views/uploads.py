"""Reading a job submission from the request: JSON with base64 content, or multipart.

The document limit (``QPRINT["MAX_DOCUMENT_BYTES"]``) is enforced before the body is read into
memory: ``Content-Length`` is checked first, a JSON body is read with a bounded read, and a
multipart body goes through an upload handler that stops as soon as the file parts pass the limit.
Django's ``DATA_UPLOAD_MAX_MEMORY_SIZE`` is deliberately not applied to these bodies (the views
never touch ``request.body``): a legitimate 50 MiB document is 67 MiB of base64.

A JSON body is never parsed whole: :func:`split_envelope` finds the ``content_base64`` string
with byte searches and refuses (413) a body whose other bytes, the envelope, pass
:func:`envelope_limit`; only the envelope (the document's string replaced by ``""``) is parsed as
JSON, and the document is decoded from its bytes in place. So what a body of any shape costs is
its bytes, the decoded document and the parse of at most :func:`envelope_limit` bytes of JSON:
never the Python objects of 70 MB of ``[[],[],...]`` (docs/SECURITY.md, "Limits").
"""

from __future__ import annotations

import binascii
import math
import re
from dataclasses import dataclass
from typing import Any

from django.core.exceptions import RequestDataTooBig, SuspiciousOperation
from django.core.files.uploadhandler import FileUploadHandler, StopUpload
from django.http import HttpRequest
from django.http.multipartparser import MultiPartParserError

from qprint.core import inputs
from qprint.core.conf import qprint_settings
from qprint.core.errors import DocumentTooLarge
from qprint.views.http import RequestError, invalid, media_type, read_limited

#: Room for the fields around the document (title, options, multipart boundaries).
ENVELOPE_BYTES = 64 * 1024


@dataclass
class Submission:
    """The fields of a job submission, as the client sent them (validated by the domain)."""

    fields: dict[str, Any]
    content: bytes
    content_type: str | None = None


def too_large(limit: int) -> DocumentTooLarge:
    return DocumentTooLarge(message=f"The document exceeds MAX_DOCUMENT_BYTES ({limit} bytes).")


def envelope_limit() -> int:
    """The most bytes a JSON submission may have outside its ``content_base64`` string: the
    fields (room for options of ``MAX_DETAIL_BYTES``) and the JSON around them."""
    return ENVELOPE_BYTES + int(qprint_settings.MAX_DETAIL_BYTES)


def json_body_limit(limit: int) -> int:
    """The largest JSON body that can carry a document of ``limit`` bytes in base64, with MIME
    line breaks (an escaped ``\\r\\n``, four bytes, after every 76 characters) and the
    envelope (:func:`envelope_limit`)."""
    encoded = 4 * math.ceil(limit / 3)
    return encoded + 4 * math.ceil(encoded / 76) + envelope_limit()


DOCUMENT_FIELD = b"content_base64"
#: Bytes that are never structure nor the start of a string: skipped in one step.
_PLAIN = re.compile(rb'[^"{}\[\],:]+')
#: What JSON encoders write inside a base64 string beside its alphabet: ``\/`` (PHP, some Java
#: encoders), MIME line breaks as ``\n``/``\r\n``, and spaces.
_BASE64_ESCAPES = ((b"\\/", b"/"), (b"\\n", b""), (b"\\r", b""), (b"\\t", b""), (b" ", b""))


def _envelope_too_large(budget: int) -> RequestError:
    return RequestError(
        "request_too_large",
        413,
        f"The fields beside content_base64 exceed {budget} bytes; send a large document as "
        "content_base64 (or multipart), not inside other fields.",
    )


def _string_end(raw: bytes, start: int, stop: int) -> int:
    """The index after the string literal opening at ``raw[start]`` (a quote); -1 when it does not
    end before ``stop``."""
    search = start + 1
    while True:
        quote = raw.find(b'"', search, stop)
        if quote < 0:
            return -1
        backslash = quote - 1
        while raw[backslash] == 0x5C:  # an escaped quote has an odd run of backslashes before it
            backslash -= 1
        if (quote - 1 - backslash) % 2 == 0:
            return quote + 1
        search = quote + 1


def split_envelope(raw: bytes, budget: int) -> tuple[bytes, tuple[int, int] | None]:
    """The body with its top-level ``content_base64`` string replaced by ``""``, and where that
    string's contents are in ``raw`` (None: no such string). 413 as soon as the bytes outside it
    pass ``budget`` and ``too_deep`` as soon as it nests deeper than ``MAX_JSON_DEPTH``, before
    anything is parsed; whether the rest is valid JSON is for the parse of
    the envelope to say (replacing one string literal by another keeps the JSON valid or not)."""
    n = len(raw)
    max_depth = int(qprint_settings.MAX_JSON_DEPTH)
    depth = 0
    expect_key = False
    key = b""
    span: tuple[int, int] | None = None
    inside = 0  # bytes of the document's string, not counted in the budget
    i = 0
    while i < n:
        if i - inside > budget:
            raise _envelope_too_large(budget)
        c = raw[i]
        if c == 0x22:  # a string: a key, the document, or another value
            if depth == 1 and not expect_key and key == DOCUMENT_FIELD and span is None:
                end = raw.find(b'"', i + 1) + 1
                if end <= 0:
                    raise invalid("body", "is not JSON (an unterminated string)")
                if raw[end - 2] == 0x5C:  # an escaped quote, or a string ending in "\\"
                    raise invalid("content_base64", "is not valid base64")
                span, inside = (i + 1, end - 1), end - i - 2
            else:
                end = _string_end(raw, i, min(n, i + budget - (i - inside) + 2))
                if end < 0:
                    if i + budget - (i - inside) + 2 < n:
                        raise _envelope_too_large(budget)
                    raise invalid("body", "is not JSON (an unterminated string)")
                if depth == 1 and expect_key:
                    key = raw[i + 1 : end - 1]
                    expect_key = False
                else:
                    key = b""
            i = end
            continue
        if c in b"{[":
            depth += 1
            if depth > max_depth:  # as the parse would refuse it, before it runs
                raise inputs.refuse(
                    inputs.TOO_DEEP, "body", f"is nested deeper than {max_depth} levels."
                )
            expect_key = depth == 1 and c == 0x7B
        elif c in b"}]":
            depth -= 1
        elif c == 0x2C and depth == 1:  # ,
            expect_key = True
            key = b""
        elif c != 0x3A:  # anything else but ':' runs to the next special byte
            plain = _PLAIN.match(raw, i)
            i = plain.end() if plain else i + 1
            continue
        i += 1
    if i - inside > budget:
        raise _envelope_too_large(budget)
    if span is None:
        return raw, None
    return raw[: span[0]] + raw[span[1] :], span


def decode_document(raw: bytes, span: tuple[int, int]) -> bytes:
    """The document of the base64 text at ``raw[span]``, decoded where it lies (no copy unless
    it holds escapes or spaces)."""
    text: bytes | memoryview = memoryview(raw)[span[0] : span[1]]
    if raw.find(b"\\", *span) >= 0 or raw.find(b" ", *span) >= 0:
        text = bytes(text)
        for escape, replacement in _BASE64_ESCAPES:
            text = text.replace(escape, replacement)
    try:
        return binascii.a2b_base64(text, strict_mode=True)
    except (binascii.Error, ValueError):
        raise invalid("content_base64", "is not valid base64") from None


def read_submission(request: HttpRequest) -> Submission:
    kind = media_type(request)
    if kind == "application/json":
        return _read_json(request)
    if kind == "multipart/form-data":
        return _read_multipart(request)
    raise RequestError(
        "unsupported_media_type",
        415,
        "Submit a job as application/json (content_base64) or multipart/form-data (document).",
    )


def _read_json(request: HttpRequest) -> Submission:
    limit = qprint_settings.MAX_DOCUMENT_BYTES
    raw = read_limited(request, json_body_limit(limit), too_large(limit)) or b"{}"
    envelope, span = split_envelope(raw, envelope_limit())
    body = inputs.parse_json("body", envelope)
    if not isinstance(body, dict):
        raise RequestError("invalid", 422, "body: a JSON object is required")
    if span is None:  # no string at the top level (absent, another type, an escaped key)
        raise invalid("content_base64", "is required (the document, base64 encoded)")
    if body.pop("content_base64", None) != "":
        raise invalid("content_base64", "must be given once")
    if span[0] == span[1]:
        raise invalid("content_base64", "is required (the document, base64 encoded)")
    # The body's bound (read_limited) bounds the string; its size is judged once decoded, line
    # breaks and escapes left out.
    content = decode_document(raw, span)
    del raw, envelope
    if len(content) > limit:
        raise too_large(limit)
    return Submission(fields=body, content=content, content_type=body.get("content_type"))


class DocumentSizeLimit(FileUploadHandler):
    """First upload handler of a submission: stops the upload once the files pass ``limit``."""

    def __init__(self, request: HttpRequest, limit: int) -> None:
        super().__init__(request)
        self.limit = limit
        self.received = 0
        self.exceeded = False

    def receive_data_chunk(self, raw_data: bytes, start: int) -> bytes:
        self.received += len(raw_data)
        if self.received > self.limit:
            self.exceeded = True
            raise StopUpload(connection_reset=True)
        return raw_data

    def file_complete(self, file_size: int) -> None:
        return None


#: Multipart form fields read as JSON (``options``) or integers.
_JSON_FORM_FIELDS = ("options",)
_INT_FORM_FIELDS = ("priority", "expires_in")


def _read_multipart(request: HttpRequest) -> Submission:
    limit = qprint_settings.MAX_DOCUMENT_BYTES
    try:
        declared = int(request.headers.get("Content-Length") or 0)
    except ValueError:
        declared = 0
    if declared > limit + ENVELOPE_BYTES:
        raise too_large(limit)
    guard = DocumentSizeLimit(request, limit)
    request.upload_handlers.insert(0, guard)
    try:
        form, files = request.POST, request.FILES
    except RequestDataTooBig:
        raise RequestError(
            "request_too_large", 413, "The form fields beside the document are too large."
        ) from None
    except (MultiPartParserError, SuspiciousOperation) as exc:
        if guard.exceeded:
            raise too_large(limit) from None
        raise RequestError("invalid", 422, f"body: malformed multipart ({exc})") from None
    if guard.exceeded:
        raise too_large(limit)
    upload = files.get("document")
    if upload is None:
        raise invalid("document", "a file part named 'document' is required")
    content = upload.read()
    if len(content) > limit:
        raise too_large(limit)
    fields: dict[str, Any] = {}
    for name, value in form.items():
        if name in _JSON_FORM_FIELDS:
            fields[name] = inputs.parse_json(name, value)
        elif name in _INT_FORM_FIELDS:
            try:
                fields[name] = int(value)
            except ValueError:
                raise invalid(name, "must be an integer") from None
        else:
            fields[name] = value
    content_type = fields.get("content_type") or upload.content_type
    fields["content_type"] = content_type
    if not fields.get("title") and upload.name:
        fields["title"] = upload.name
    return Submission(fields=fields, content=content, content_type=content_type)
