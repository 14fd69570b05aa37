"""``GET api/v1/jobs/<id>/preview.png?page=1&width=600``: a page of the job as a PNG (docs/API.md,
docs/DOCUMENTS.md).

An async view in two steps, neither on the event loop: the key, the job (in the key's tenant) and
the cache are read on the node's HTTP database threads; a page not cached is drawn on threads of
its own, as many as the process has render workers (``QPRINT["RENDER_WORKERS"]``), so a slow
document never holds a thread the other API calls need. At most four draws per worker wait at a
time; more are answered 503 ``render_busy`` at once rather than queued without end.
"""

from __future__ import annotations

import threading

from django.http import HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt

from qprint.core import executor
from qprint.core.conf import qprint_settings
from qprint.core.errors import QPrintError
from qprint.documents import render
from qprint.domain import previews
from qprint.models import ApplicationKey
from qprint.views.http import application_endpoint, error_response, invalid

#: The threads that draw pages (each waits on one render worker).
draw_threads = executor.DatabaseThreads("preview", "RENDER_WORKERS")
#: Draws waiting or running per render worker before 503 ``render_busy``.
QUEUED_PER_WORKER = 4

_lock = threading.Lock()
_drawing = 0


def _number(request: HttpRequest, name: str, default: int) -> int:
    raw = request.GET.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise invalid(name, "must be a whole number") from None


def png_response(png: bytes) -> HttpResponse:
    response = HttpResponse(png, content_type="image/png")
    response["Content-Length"] = str(len(png))
    # A job's document never changes; the answer is the key's tenant's only.
    response["Cache-Control"] = "private, max-age=3600"
    return response


@application_endpoint("GET")
def _look_up(request: HttpRequest, key: ApplicationKey, job_id: str):
    page = _number(request, "page", 1)
    width = _number(request, "width", previews.DEFAULT_WIDTH)
    found = previews.preview_of(key.tenant, job_id, page=page, width=width)
    return png_response(found) if isinstance(found, bytes) else found


def _admitted() -> bool:
    global _drawing
    with _lock:
        if _drawing >= QUEUED_PER_WORKER * int(qprint_settings.RENDER_WORKERS):
            return False
        _drawing += 1
        return True


def _done() -> None:
    global _drawing
    with _lock:
        _drawing -= 1


@csrf_exempt
async def job_preview(request: HttpRequest, job_id: str) -> HttpResponse:
    if request.method != "GET":
        return error_response(
            "method_not_allowed",
            405,
            f"{request.method} is not allowed here; use GET.",
            {"Allow": "GET"},
        )
    found = await executor.http.run(_look_up, request, job_id=job_id)
    if isinstance(found, HttpResponse):
        return found
    if not _admitted():
        busy = render.RenderBusy()
        return error_response(busy.code, busy.status, busy.message, {"Retry-After": "1"})
    try:
        png = await draw_threads.run(previews.draw, found)
    except QPrintError as exc:
        headers = {"Retry-After": "1"} if exc.status == 503 else None
        return error_response(exc.code, exc.status, exc.message, headers)
    finally:
        _done()
    return png_response(png)


job_preview.allowed_methods = ("GET",)  # read by the OpenAPI test
