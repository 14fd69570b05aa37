"""A job's page as a picture, for the application (``GET api/v1/jobs/<id>/preview.png``) and the
admin's job page (docs/DOCUMENTS.md, "Preview").

Two steps so that a transport can run them on different threads: :func:`preview_of` (a database
read: the job in the caller's tenant, its content type, the cache) and :func:`draw` (the
document's bytes and the render, up to ``RENDER_TIMEOUT_SECONDS``). :func:`job_preview` does both.

Rendered pages, and refusals, are kept per (job, page, width) in the process's render cache
(:func:`qprint.documents.render.keep`): a job's document never changes (a reprint is a new job), so
an entry is never stale; it leaves when space is needed (``QPRINT["RENDER_CACHE_BYTES"]`` per
process). A job deleted by retention is not found before its entries are looked at.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from qprint.core.errors import Invalid
from qprint.documents import render, storage
from qprint.domain import jobs
from qprint.models import PrintJob

DEFAULT_WIDTH = 600
MAX_WIDTH = 1600


@dataclass(frozen=True)
class PageToDraw:
    job_id: uuid.UUID
    content_type: str
    page: int
    width: int

    @property
    def key(self) -> tuple[uuid.UUID, int, int, str]:
        return (self.job_id, self.page, self.width, "rgb")


def check_page_and_width(page: int, width: int) -> None:
    if isinstance(page, bool) or not isinstance(page, int) or page < 1:
        raise Invalid(message="page: must be a page number from 1")
    if isinstance(width, bool) or not isinstance(width, int) or not 1 <= width <= MAX_WIDTH:
        raise Invalid(message=f"width: must be a number of pixels from 1 to {MAX_WIDTH}")


def preview_of(
    tenant: str, job_id: uuid.UUID | str, *, page: int = 1, width: int = DEFAULT_WIDTH
) -> bytes | PageToDraw:
    """The cached PNG of the page, or what :func:`draw` needs to make it. Raises ``NotFound``
    (no such job in ``tenant``), 415 ``no_preview`` (a raw printer language: the reason says
    so), a cached refusal, ``Invalid`` (page or width)."""
    check_page_and_width(page, width)
    return _to_draw(jobs.get_job(tenant, job_id), page, width)


def _to_draw(job: PrintJob, page: int, width: int) -> bytes | PageToDraw:
    render.check_renderable(job.content_type)
    wanted = PageToDraw(job.pk, job.content_type, page, width)
    return render.kept(wanted.key) or wanted


def draw(page: PageToDraw) -> bytes:
    """Render the page (reading the document) and keep the outcome. Raises ``NotFound`` (the
    document is no longer stored) and :class:`~qprint.documents.render.RenderRefused`."""

    def drawn() -> bytes:
        content = storage.open_document(page.job_id)
        return render.render_page(content, page.content_type, page=page.page, width=page.width)

    return render.keep(page.key, drawn)  # another request may have drawn it meanwhile


def job_preview(job: PrintJob, *, page: int = 1, width: int = DEFAULT_WIDTH) -> bytes:
    """The page of ``job`` (already looked up by the caller, e.g. the admin) as a PNG."""
    check_page_and_width(page, width)
    wanted = _to_draw(job, page, width)
    return wanted if isinstance(wanted, bytes) else draw(wanted)
