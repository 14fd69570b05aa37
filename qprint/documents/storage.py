"""Where a job's bytes live, behind one seam: :func:`save_document`, :func:`open_document`,
:func:`delete_documents` (and :func:`document_insert` for the submission's one statement). This
module is the one writer of ``qprint_document`` (``tests/qprint/test_owners.py``).

``QPRINT["DOCUMENT_BACKEND"]`` names the backend by dotted path:

- ``qprint.documents.storage.DatabaseDocuments`` (default): ``PrintDocument`` rows in the
  database, so every node serves every document with nothing else to share, and a document is
  saved in the same transaction as its job (a rolled-back submission leaves nothing behind).
- ``qprint.documents.storage.StorageDocuments``: a Django storage
  (``STORAGES[QPRINT["DOCUMENT_STORAGE"]]``, e.g. S3 through django-storages) for large
  documents that should not sit in the database. The file is written before the job's transaction
  commits; a submission that rolls back can leave an orphan file behind (harmless: it is never
  served, and its name is the job's random UUID).

A backend is any class with the three methods of :class:`DocumentBackend`. The shorter paths
``qprint.documents.DatabaseDocuments`` and ``qprint.documents.StorageDocuments`` name the same
classes.
"""

import hashlib
import uuid
from collections.abc import Iterable
from functools import lru_cache
from typing import Protocol

from django.core.files.base import ContentFile
from django.db.models import UUIDField
from django.utils.module_loading import import_string

from qprint.core.conf import qprint_settings
from qprint.core.errors import NotFound
from qprint.core.prepared import Param, PreparedQuery
from qprint.models import PrintDocument, PrintJob


class DocumentBackend(Protocol):
    def save(self, job: PrintJob, content: bytes) -> None:
        """Store ``content`` as the job's document."""

    def open(self, job_id: uuid.UUID) -> bytes | None:
        """The document's bytes, or None when it is not stored."""

    def delete(self, job_ids: Iterable[uuid.UUID]) -> None:
        """Forget the documents of these jobs (called before their rows are deleted)."""


class DatabaseDocuments:
    """Documents as ``PrintDocument`` rows (deleted with their job by the foreign key)."""

    def save(self, job: PrintJob, content: bytes) -> None:
        PrintDocument.objects.create(job=job, content=content)

    _content = PreparedQuery(
        lambda: PrintDocument.objects.filter(job_id=Param("job", UUIDField())).only("content")[:1]
    )

    def open(self, job_id: uuid.UUID) -> bytes | None:
        document = self._content.first(job=job_id)
        return None if document is None else bytes(document.content)

    def delete(self, job_ids: Iterable[uuid.UUID]) -> None:
        PrintDocument.objects.filter(job_id__in=list(job_ids)).delete()


class StorageDocuments:
    """Documents as files of a Django storage, named ``qprint/<job id>``."""

    def __init__(self, alias: str | None = None) -> None:
        self.alias = alias

    @property
    def storage(self):
        from django.core.files.storage import storages

        return storages[self.alias or qprint_settings.DOCUMENT_STORAGE]

    @staticmethod
    def name(job_id: uuid.UUID) -> str:
        return f"qprint/{job_id}"

    def save(self, job: PrintJob, content: bytes) -> None:
        saved = self.storage.save(self.name(job.pk), ContentFile(content))
        if saved != self.name(job.pk):  # the storage renamed it: a file of that name existed
            self.storage.delete(saved)
            raise FileExistsError(f"A document for job {job.pk} is already stored.")

    def open(self, job_id: uuid.UUID) -> bytes | None:
        name = self.name(job_id)
        if not self.storage.exists(name):
            return None
        with self.storage.open(name, "rb") as stored:
            return stored.read()

    def delete(self, job_ids: Iterable[uuid.UUID]) -> None:
        for job_id in job_ids:
            self.storage.delete(self.name(job_id))


@lru_cache(maxsize=4)
def _backend(path: str) -> DocumentBackend:
    return import_string(path)()


def backend() -> DocumentBackend:
    """The configured backend (one instance per dotted path)."""
    return _backend(qprint_settings.DOCUMENT_BACKEND)


def digest(content: bytes) -> str:
    """The SHA-256 hex digest devices check a download against (and the document's ETag)."""
    return hashlib.sha256(content).hexdigest()


def save_document(job: PrintJob, content: bytes) -> None:
    """Store ``content`` as ``job``'s document (inside the caller's transaction)."""
    backend().save(job, content)


def in_database() -> bool:
    """True when the configured backend keeps documents in the database (``DatabaseDocuments``):
    then a statement that inserts the job may insert its document too (:func:`document_insert`)."""
    return type(backend()) is DatabaseDocuments


def document_insert(
    rows: str, job_id: uuid.UUID, content: bytes, *, binary: bool = False
) -> tuple[str, list]:
    """``job_id``'s document as an ``INSERT ... SELECT ... FROM rows`` (positional parameters), for
    a statement of data-modifying CTEs that inserts the job in the same round trip (only when
    :func:`in_database`). ``binary``: the content's placeholder is psycopg's ``%b`` (a binary
    parameter), for a statement run on psycopg's own server-binding cursor."""
    placeholder = "%b" if binary else "%s"
    return f"INSERT INTO qprint_document (job_id, content) SELECT %s, {placeholder} FROM {rows}", [
        job_id,
        content,
    ]


def document_select(job_id: str) -> str | None:
    """The bytes of the document of the job whose id is the SQL expression ``job_id``, as a scalar
    subquery (NULL when they are gone), for a statement that hands the job out to read them in the
    same round trip; None when the backend does not keep documents in the database."""
    if not in_database():
        return None
    return f"(SELECT content FROM qprint_document WHERE job_id = {job_id})"


def open_document(job: PrintJob | uuid.UUID | str) -> bytes:
    """The bytes of ``job``'s document; :class:`~qprint.core.errors.NotFound` when they are gone."""
    job_id = job.pk if isinstance(job, PrintJob) else uuid.UUID(str(job))
    content = backend().open(job_id)
    if content is None:
        raise NotFound(message="The job's document is no longer stored.")
    return content


def delete_documents(job_ids: Iterable[uuid.UUID]) -> None:
    """Forget the documents of these jobs (retention)."""
    backend().delete(job_ids)
