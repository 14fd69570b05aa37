"""One page of a PDF, PNG or JPEG document as a PNG, drawn by bounded worker processes.

- :func:`render_page`: the page as a PNG ``width`` pixels wide, ``mode`` ``"rgb"``, ``"gray"`` or
  ``"mono"`` (1-bit, dithered: what a receipt or label printer that wants pixels prints at its
  ``dots`` width). :func:`page_count` and :func:`page_sizes` read the document the same way.
- :class:`RenderRefused`: every refusal, a :class:`~qprint.core.errors.QPrintError`: 415
  ``no_preview``
  for what is not a PDF, PNG or JPEG (raw printer languages above all); 422 ``encrypted_document``,
  ``broken_document``, ``too_many_pages``, ``page_too_large``, ``too_many_pixels``,
  ``no_such_page``, ``render_too_slow``, ``too_much_memory``, ``render_failed``; and
  :class:`RenderBusy`, 503 ``render_busy`` when every worker stayed busy for the time limit.
- :func:`render_strip`: the first pages one under the other, one PNG (a receipt printer's image).
- :class:`PageCache`: rendered images (and refusals) by key, bounded in bytes; :data:`pages` is
  this process's, which :func:`keep` fills and :func:`kept` reads.

Bounds (docs/DOCUMENTS.md, "Bounds"): PDFium and Pillow never run in a node's own process. Each
process keeps up to ``QPRINT["RENDER_WORKERS"]`` worker processes (:mod:`qprint.documents.worker`),
each capped at ``QPRINT["RENDER_MEMORY_BYTES"]`` of address space, and waits for an answer at most
``QPRINT["RENDER_TIMEOUT_SECONDS"]``: a worker still working then is killed (SIGKILL), one that
died is replaced, and the caller gets a 422. A document of more than ``RENDER_MAX_PAGES`` pages, a
page larger than the PDF format allows, or a bitmap of more than ``RENDER_MAX_PIXELS`` is refused
before anything is drawn. The calls block (up to the time limit): async code runs them on a
thread (:func:`qprint.domain.previews.job_preview` does).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import select
import subprocess
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import Any

from qprint.core.conf import qprint_settings
from qprint.core.errors import QPrintError
from qprint.documents.worker import IMAGE_TYPES, MODES, PDF_TYPES

logger = logging.getLogger(__name__)

#: Content types that are drawn (the rest answer 415 ``no_preview``).
RENDERABLE = PDF_TYPES | frozenset(IMAGE_TYPES)
#: A worker is replaced after this many documents (a long-lived heap only grows).
WORKER_MAX_USES = 500
#: Seconds a new worker has to import PDFium and say it is ready.
WORKER_START_SECONDS = 30
_HEADER_BYTES = 64 * 1024

MESSAGES = {
    "render_too_slow": "Rendering the document took longer than {seconds:g} s; it was stopped.",
    "too_much_memory": "Rendering the document needed more than {mib} MiB; it was stopped.",
    "render_failed": "The renderer stopped on this document (it is damaged, or needed more "
    "than {mib} MiB).",
}


class RenderRefused(QPrintError):
    """The document (or this page of it) is not rendered: 415 ``no_preview``, otherwise 422."""

    code = "render_failed"
    status = 422
    default_message = "The document cannot be rendered."

    def __init__(self, code: str | None = None, message: str | None = None) -> None:
        super().__init__(code, message)
        if self.code == "no_preview":
            self.status = 415

    def again(self) -> RenderRefused:
        """The same refusal as a new exception, with no traceback: what a cache keeps and raises
        (a raised exception holds its frames, and with them the document's bytes; raised again,
        it gains more)."""
        return type(self)(self.code, self.message)


class RenderBusy(RenderRefused):
    """Every render worker of this process stayed busy for the time limit (HTTP 503)."""

    code = "render_busy"
    status = 503
    default_message = "Every renderer is busy; retry in a moment."


def base_type(content_type: str) -> str:
    return content_type.split(";", 1)[0].strip().lower()


def no_preview_reason(content_type: str) -> str | None:
    """Why a document of this type has no preview (``None``: it has one)."""
    base = base_type(content_type)
    if base in RENDERABLE:
        return None
    if base.startswith("text/"):
        return f"{base} is sent to the printer as text; only PDF, PNG and JPEG documents are drawn."
    return (
        f"{base} is a printer language: the printer itself turns it into a page, so qprint "
        "cannot show it (only PDF, PNG and JPEG documents are drawn)."
    )


def check_renderable(content_type: str) -> str:
    """The base content type; 415 ``no_preview`` unless it is a PDF, PNG or JPEG."""
    reason = no_preview_reason(content_type)
    if reason is not None:
        raise RenderRefused("no_preview", reason)
    return base_type(content_type)


class _WorkerGone(Exception):
    """The worker closed its pipe (it died) or broke the protocol."""


class _Worker:
    """One worker process and its two pipes (this process's own child, killed by its pid)."""

    def __init__(self, memory_bytes: int) -> None:
        self.memory_bytes = memory_bytes
        self.uses = 0
        env = dict(os.environ)
        # The worker imports qprint from wherever this process did (a checkout, site-packages).
        root = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "qprint.documents.worker", str(memory_bytes)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            close_fds=True,
        )
        self._in = self.process.stdin.fileno()
        self._out = self.process.stdout.fileno()
        os.set_blocking(self._in, False)
        os.set_blocking(self._out, False)
        self._buffer = bytearray()
        try:
            ready = self._header(time.monotonic() + WORKER_START_SECONDS)
        except (_WorkerGone, TimeoutError):
            self.kill()
            raise
        if not ready.get("ready"):
            self.kill()
            raise _WorkerGone("the worker did not start")

    def _wait(self, fd: int, event: int, deadline: float) -> None:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError
        poller = select.poll()
        poller.register(fd, event | select.POLLERR | select.POLLHUP)
        if not poller.poll(remaining * 1000):
            raise TimeoutError

    def _send(self, data: bytes, deadline: float) -> None:
        view = memoryview(data)
        while view:
            self._wait(self._in, select.POLLOUT, deadline)
            try:
                written = os.write(self._in, view)
            except BlockingIOError:
                continue
            except (BrokenPipeError, OSError):
                raise _WorkerGone("the worker closed its input") from None
            view = view[written:]

    def _fill(self, deadline: float) -> None:
        self._wait(self._out, select.POLLIN, deadline)
        try:
            chunk = os.read(self._out, 1 << 20)
        except BlockingIOError:
            return
        if not chunk:
            raise _WorkerGone("the worker closed its output")
        self._buffer += chunk

    def _header(self, deadline: float) -> dict[str, Any]:
        while b"\n" not in self._buffer:
            if len(self._buffer) > _HEADER_BYTES:
                raise _WorkerGone("the worker's answer has no header")
            self._fill(deadline)
        line, _, rest = bytes(self._buffer).partition(b"\n")
        self._buffer = bytearray(rest)
        try:
            header = json.loads(line)
        except ValueError:
            raise _WorkerGone("the worker's header is not JSON") from None
        if not isinstance(header, dict):
            raise _WorkerGone("the worker's header is not an object")
        return header

    def ask(
        self, request: dict[str, Any], content: bytes, deadline: float, max_body: int
    ) -> tuple[dict[str, Any], bytes]:
        self.uses += 1
        self._send(json.dumps({**request, "size": len(content)}).encode() + b"\n", deadline)
        self._send(content, deadline)
        header = self._header(deadline)
        size = header.get("size", 0)
        if not isinstance(size, int) or not 0 <= size <= max_body:
            raise _WorkerGone("the worker's answer has a wrong size")
        while len(self._buffer) < size:
            self._fill(deadline)
        body, self._buffer = bytes(self._buffer[:size]), self._buffer[size:]
        return header, body

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        for pipe in (self.process.stdin, self.process.stdout):
            with contextlib.suppress(OSError):
                pipe.close()

    def close(self) -> None:
        """Ask the worker to stop (end of its input), then make sure it did."""
        try:
            self.process.stdin.close()
            self.process.wait(timeout=2)
        except (OSError, subprocess.TimeoutExpired):
            pass
        self.kill()


class WorkerPool:
    """Up to ``size`` workers of this process, each used by one caller at a time."""

    def __init__(self) -> None:
        self._lock = threading.Condition()
        self._idle: list[_Worker] = []
        self._live = 0
        self._pid = os.getpid()

    def _forked(self) -> None:
        # A forked child does not own its parent's workers (their pipes are shared): start anew.
        if self._pid != os.getpid():
            self._idle, self._live, self._pid = [], 0, os.getpid()

    def _acquire(self, size: int, memory_bytes: int, deadline: float) -> _Worker:
        with self._lock:
            self._forked()
            while True:
                while self._idle:
                    worker = self._idle.pop()
                    if worker.memory_bytes == memory_bytes and worker.process.poll() is None:
                        return worker
                    self._live -= 1
                    worker.kill()
                if self._live < size:
                    self._live += 1
                    break
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise RenderBusy()
                self._lock.wait(remaining)
        try:
            return _Worker(memory_bytes)
        except (OSError, _WorkerGone, TimeoutError) as exc:
            with self._lock:
                self._live -= 1
                self._lock.notify()
            logger.error("The document render worker could not start: %s", exc)
            raise RenderBusy("render_unavailable", "The renderer could not be started.") from exc

    def _release(self, worker: _Worker, healthy: bool) -> None:
        keep = healthy and worker.uses < WORKER_MAX_USES
        if not keep:
            worker.kill() if not healthy else worker.close()
        with self._lock:
            if keep and self._pid == os.getpid():
                self._idle.append(worker)
            else:
                self._live -= 1
            self._lock.notify()

    def ask(self, request: dict[str, Any], content: bytes) -> tuple[dict[str, Any], bytes]:
        seconds = float(qprint_settings.RENDER_TIMEOUT_SECONDS)
        memory_bytes = int(qprint_settings.RENDER_MEMORY_BYTES)
        max_pixels = int(qprint_settings.RENDER_MAX_PIXELS)
        request = {
            **request,
            "max_pages": int(qprint_settings.RENDER_MAX_PAGES),
            "max_pixels": max_pixels,
        }
        worker = self._acquire(
            int(qprint_settings.RENDER_WORKERS), memory_bytes, time.monotonic() + seconds
        )
        values = {"seconds": seconds, "mib": memory_bytes // (1024 * 1024)}
        healthy = False
        try:
            header, body = worker.ask(
                request, content, time.monotonic() + seconds, max_body=max_pixels * 4 + (1 << 20)
            )
            # A worker that ran out of memory says so and exits: it is not given the next one.
            healthy = header.get("code") != "too_much_memory" and worker.process.poll() is None
        except TimeoutError:
            message = MESSAGES["render_too_slow"].format(**values)
            raise RenderRefused("render_too_slow", message) from None
        except _WorkerGone as exc:
            code = worker.process.poll()
            logger.warning("A document render worker died (%s, exit status %s).", exc, code)
            message = MESSAGES["render_failed"].format(**values)
            raise RenderRefused("render_failed", message) from None
        finally:
            self._release(worker, healthy)
        if not header.get("ok"):
            code = str(header.get("code") or "render_failed")
            message = str(header.get("message") or "")
            if code in MESSAGES:
                message = MESSAGES[code].format(**values)
            raise RenderRefused(code, message or None)
        return header, body

    def close(self) -> None:
        """Stop the idle workers (tests, shutdown)."""
        with self._lock:
            idle, self._idle = self._idle, []
            self._live -= len(idle)
        for worker in idle:
            worker.close()


#: This process's workers.
workers = WorkerPool()


def _positive(name: str, value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name} must be a positive integer, not {value!r}")
    return value


def _drawing(op: str, content_type: str, width: int, mode: str) -> dict[str, Any]:
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
    _positive("width", width)
    return {"op": op, "content_type": check_renderable(content_type), "width": width, "mode": mode}


def render_page(
    content: bytes, content_type: str, *, page: int = 1, width: int, mode: str = "rgb"
) -> bytes:
    """Page ``page`` (from 1) of the document as a PNG ``width`` pixels wide (the height follows
    the page). ``mode``: ``"rgb"``, ``"gray"`` (8-bit grey) or ``"mono"`` (1-bit, dithered).
    Raises :class:`RenderRefused`."""
    request = _drawing("render", content_type, width, mode)
    request["page"] = _positive("page", page)
    return workers.ask(request, content)[1]


def render_strip(
    content: bytes, content_type: str, *, pages: int, width: int, mode: str = "mono"
) -> bytes:
    """The document's first ``pages`` pages one under the other, as one PNG ``width`` pixels
    wide (an image is its one page): what a printer that takes one image per job prints, a
    receipt having no page breaks. Drawn in one worker request, so the whole strip has one
    time limit, and its pixels, all pages together, are bounded by ``RENDER_MAX_PIXELS``
    (422 ``too_many_pixels`` before anything is drawn). Raises :class:`RenderRefused`."""
    request = _drawing("strip", content_type, width, mode)
    request["pages"] = _positive("pages", pages)
    return workers.ask(request, content)[1]


def _info(content: bytes, content_type: str) -> dict[str, Any]:
    base = check_renderable(content_type)
    return workers.ask({"op": "info", "content_type": base}, content)[0]


def page_count(content: bytes, content_type: str) -> int:
    """The document's number of pages (1 for an image). Raises :class:`RenderRefused`."""
    return int(_info(content, content_type)["pages"])


def page_sizes(content: bytes, content_type: str) -> list[tuple[float, float]]:
    """Each page's width and height in PDF units (1/72 in), as displayed (``/Rotate`` applied);
    empty for an image, which has no size of its own. Raises :class:`RenderRefused`."""
    return [(float(w), float(h)) for w, h in _info(content, content_type)["sizes"]]


class PageCache:
    """Rendered pages, and refusals, by key, least recently used out first, at most
    ``QPRINT["RENDER_CACHE_BYTES"]`` of PNG bytes in this process (a page larger than a quarter
    of it is not kept). A job's document never changes, so an entry is never stale: an entry
    only leaves to make room (or with :meth:`clear`)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: OrderedDict[Hashable, bytes | RenderRefused] = OrderedDict()
        self._bytes = 0

    @staticmethod
    def _size(value: bytes | RenderRefused) -> int:
        return len(value) if isinstance(value, bytes) else 256

    def get(self, key: Hashable) -> bytes | RenderRefused | None:
        with self._lock:
            value = self._entries.get(key)
            if value is not None:
                self._entries.move_to_end(key)
            return value

    def put(self, key: Hashable, value: bytes | RenderRefused) -> None:
        if isinstance(value, RenderRefused):
            value = value.again()  # its code and message only (a few hundred bytes)
        limit = int(qprint_settings.RENDER_CACHE_BYTES)
        size = self._size(value)
        if size > limit // 4:
            return
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._bytes -= self._size(old)
            self._entries[key] = value
            self._bytes += size
            while self._bytes > limit and self._entries:
                _, evicted = self._entries.popitem(last=False)
                self._bytes -= self._size(evicted)

    @property
    def bytes(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._bytes = 0


#: This process's rendered images, and refusals, for every caller: one bound per process.
pages = PageCache()


def keep(key: Hashable, draw: Callable[[], bytes]) -> bytes:
    """The image kept under ``key``, else ``draw()``'s, kept. A kept refusal is raised again, and
    ``draw()``'s refusal is kept and raised, but for :class:`RenderBusy` (not the document's
    fault: the next try may render it). A job's document never changes (a reprint is a new job),
    so a key naming the job, the page(s), the width and the mode is never stale."""
    hit = kept(key)
    if hit is not None:
        return hit
    try:
        png = draw()
    except RenderBusy:
        raise
    except RenderRefused as exc:
        pages.put(key, exc)
        raise
    pages.put(key, png)
    return png


def kept(key: Hashable) -> bytes | None:
    """The image kept under ``key`` (``None``: none); a kept refusal is raised again."""
    hit = pages.get(key)
    if isinstance(hit, RenderRefused):
        raise hit.again()
    return hit
