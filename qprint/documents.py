"""Where a job's bytes live. The default keeps them in ``PrintDocument`` rows, in the database,
so every node can serve any document with no shared file system.

This module is the seam: everything reads and writes documents through :func:`save_document` and
:func:`open_document`, so moving the bytes to object storage means changing only this module.
"""

import hashlib

from qprint.errors import NotFound
from qprint.models import PrintDocument, PrintJob


def digest(content: bytes) -> str:
    """The SHA-256 hex digest devices check a download against (and the document's ETag)."""
    return hashlib.sha256(content).hexdigest()


def save_document(job: PrintJob, content: bytes) -> None:
    """Store ``content`` as ``job``'s document (inside the caller's transaction)."""
    PrintDocument.objects.create(job=job, content=content)


def open_document(job: PrintJob | str) -> bytes:
    """The bytes of ``job``'s document; :class:`~qprint.errors.NotFound` when they are gone."""
    job_id = job.pk if isinstance(job, PrintJob) else job
    content = PrintDocument.objects.filter(job_id=job_id).values_list("content", flat=True).first()
    if content is None:
        raise NotFound(message="The job's document is no longer stored.")
    return bytes(content)
