"""Reading a job submission from the request: JSON with base64 content, or multipart.

The document limit (``QPRINT["MAX_DOCUMENT_BYTES"]``) is enforced before the body is read into
memory: ``Content-Length`` is checked first, a JSON body is read with a bounded read, and a
multipart body goes through an upload handler that stops as soon as the file parts pass the limit.
Django's ``DATA_UPLOAD_MAX_MEMORY_SIZE`` is deliberately not applied to these bodies (the views
never touch ``request.body``): a legitimate 50 MiB document is 67 MiB of base64.
"""

from __future__ import annotations

import base64
import binascii
import math
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


def json_body_limit(limit: int) -> int:
    """The largest JSON body that can carry a document of ``limit`` bytes in base64."""
    return 4 * math.ceil(limit / 3) + ENVELOPE_BYTES


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
    raw = read_limited(request, json_body_limit(limit), too_large(limit))
    body = inputs.parse_json("body", raw or b"{}")
    if not isinstance(body, dict):
        raise RequestError("invalid", 422, "body: a JSON object is required")
    encoded = body.pop("content_base64", None)
    if not isinstance(encoded, str) or not encoded:
        raise invalid("content_base64", "is required (the document, base64 encoded)")
    if len(encoded) > json_body_limit(limit) - ENVELOPE_BYTES:
        raise too_large(limit)
    if any(blank in encoded for blank in " \t\r\n"):
        encoded = "".join(encoded.split())  # MIME-style line breaks, as `base64` writes them
    try:
        content = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        raise invalid("content_base64", "is not valid base64") from None
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
