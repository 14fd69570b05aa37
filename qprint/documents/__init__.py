"""A job's document: where its bytes live, what it looks like, whether it fits the printer.

- :mod:`qprint.documents.storage`: the one writer of ``qprint_document`` (the document backends).
- :mod:`qprint.documents.render`: one page of a PDF, PNG or JPEG document to a PNG, in a bounded
  worker process (docs/DOCUMENTS.md).
- :mod:`qprint.documents.media`: the document's page sizes against the media a printer reported.

Importing this package imports nothing (the render worker, a plain Python process, loads it). The
storage names stay reachable here (``qprint.documents.DatabaseDocuments``, ``open_document``, ...)
for settings and code written before the package existed; they are loaded on first use.
"""

from typing import Any

_STORAGE_NAMES = frozenset(
    {
        "DatabaseDocuments",
        "DocumentBackend",
        "StorageDocuments",
        "backend",
        "delete_documents",
        "digest",
        "open_document",
        "save_document",
    }
)


def __getattr__(name: str) -> Any:
    if name in _STORAGE_NAMES:
        from qprint.documents import storage

        return getattr(storage, name)
    raise AttributeError(f"module 'qprint.documents' has no attribute {name!r}")
