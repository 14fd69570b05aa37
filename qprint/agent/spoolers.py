"""Spooler backends: where a verified document goes once the journal says it may.

- ``cups``: ``lp -d QUEUE`` submits the document to a CUPS queue; the agent follows the CUPS job
  with ``lpstat`` until CUPS has finished it. Printers are reported from ``lpstat``.
- ``directory``: writes each document once, atomically, named by job id (tmp file + fsync, then a
  hard link to the final name, which fails instead of overwriting an earlier document), and
  appends the write to ``spool-ledger.log`` in the same directory, so a second write of one job
  could be seen and is refused.
- ``null``: accepts and forgets (load tests of the server).

``submit`` either returns a reference to the submitted job, raises ``SpoolRejected`` when nothing
was submitted (the job FAILED), or raises anything else when the outcome is unknown. Backends are
blocking; the agent calls them in a worker thread.
"""

import mimetypes
import os
import re
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from qprint.agent import ipp
from qprint.agent import options as o
from qprint.core.text import digits

LEDGER_NAME = "spool-ledger.log"
#: What a job id may be to name a file: letters, digits and hyphens (a UUID, ``test-page-<ms>``).
_SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]{0,99}")


class SpoolRejected(Exception):
    """The spooler refused the document: nothing was printed, the job FAILED."""


class SpoolInterrupted(Exception):
    """A submission was cut off part way: the printer may have printed some or all of it."""


class AlreadySpooled(Exception):
    """The document of this job was already written by an earlier submission."""


@dataclass(frozen=True)
class SpoolJob:
    job_id: str
    title: str
    content_type: str
    data: bytes
    printer: str | None = None
    options: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Outcome:
    """How a submitted job ended: ``PRINTED``, ``FAILED`` or ``OUTCOME_UNKNOWN``."""

    status: str
    message: str = ""


class Spooler:
    name = "base"

    def describe(self) -> tuple[str, dict[str, Any]]:
        """``(status, capabilities)`` of the one printer behind this backend."""
        return "idle", {}

    def printers(self) -> list[dict[str, Any]]:
        status, capabilities = self.describe()
        return [
            {"name": "default", "is_default": True, "status": status, "capabilities": capabilities}
        ]

    def submit(self, job: SpoolJob) -> str:
        raise NotImplementedError

    def follow(self, ref: str, timeout: float) -> Outcome:
        """Wait until the spooler has finished ``ref``."""
        return Outcome("PRINTED")

    def settled(self, ref: str) -> Outcome | None:
        """How ``ref`` ended when the submission itself finished it (a file written, bytes
        handed to a raw printer: :meth:`follow` would answer at once), else None: the spooler
        holds the job and :meth:`follow` waits for it."""
        return Outcome("PRINTED") if type(self).follow is Spooler.follow else None

    def cancel(self, ref: str) -> bool:
        """Stop ``ref`` if it has not been printed yet; True when it was stopped."""
        return False

    def test_page(self, printer: str | None) -> str:
        return self.submit(
            SpoolJob(
                job_id=f"test-page-{int(time.time() * 1000)}",
                title="qprint test page",
                content_type="text/plain",
                data=b"qprint test page\n",
                printer=printer,
            )
        )


class NullSpooler(Spooler):
    name = "null"

    def submit(self, job: SpoolJob) -> str:
        return f"null:{job.job_id}"


#: A media type without parameters, as ``lp -o document-format=`` may take it: nothing that lp
#: or libcups would split into more options (spaces, commas, quotes, ``=``).
_MEDIA_TYPE = re.compile(r"[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]*/[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]*")


def base_media_type(content_type: str | None) -> str | None:
    """The base type of ``content_type`` (its parameters dropped), ``None`` when there is none;
    :class:`SpoolRejected` when it is not a media type at all."""
    base = (content_type or "").split(";", 1)[0].strip()
    if not base:
        return None
    if not _MEDIA_TYPE.fullmatch(base):
        raise SpoolRejected(f"content type {content_type!r} is not a media type")
    return base.lower()


def _extension(content_type: str) -> str:
    if content_type == "application/pdf":
        return ".pdf"
    return mimetypes.guess_extension(content_type.split(";")[0].strip()) or ".bin"


class DirectorySpooler(Spooler):
    name = "directory"

    def __init__(self, directory: str | Path):
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self._ledger_lock = threading.Lock()

    def path_for(self, job: SpoolJob) -> Path:
        """The document's file: named by the job id (a UUID, or the agent's own test page id),
        never a path: anything else is refused before a byte is written."""
        if not _SAFE_NAME.fullmatch(job.job_id):
            raise SpoolRejected(f"job id {job.job_id!r} is not a file name")
        return self.directory / f"{job.job_id}{_extension(job.content_type)}"

    def describe(self) -> tuple[str, dict[str, Any]]:
        return "idle", {"path": str(self.directory)}

    def printers(self) -> list[dict[str, Any]]:
        status, capabilities = self.describe()
        return [
            {
                "name": "directory",
                "is_default": True,
                "status": status,
                "capabilities": capabilities,
            }
        ]

    def submit(self, job: SpoolJob) -> str:
        final = self.path_for(job)  # checks the id before it names the temporary file too
        fd, tmp = tempfile.mkstemp(prefix=f".{job.job_id}.", suffix=".tmp", dir=self.directory)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(job.data)
                f.flush()
                os.fsync(f.fileno())
            try:
                os.link(tmp, final)  # atomic, and never replaces an existing document
            except FileExistsError:
                self._ledger(job.job_id, "refused_duplicate", final)
                raise AlreadySpooled(str(final)) from None
        finally:
            os.unlink(tmp)
        self._fsync_directory()
        self._ledger(job.job_id, "written", final)
        return str(final)

    def _ledger(self, job_id: str, what: str, path: Path) -> None:
        line = f"{time.time():.6f} {what} {job_id} {path.name}\n"
        with self._ledger_lock, open(self.directory / LEDGER_NAME, "a") as f:
            f.write(line)
            f.flush()
            os.fsync(f.fileno())

    def _fsync_directory(self) -> None:
        fd = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def follow_ipp_job(
    client: ipp.IppClient,
    job_id: int,
    label: str,
    timeout: float,
    poll_interval: float,
    asked_to_cancel,
) -> Outcome:
    """Get-Job-Attributes until the job is completed, aborted or canceled.

    A job canceled without the agent asking (CUPS reports a job the printer aborted as canceled)
    is FAILED; canceled after the agent's own Cancel-Job is CANCELLED; a job the printer no longer
    knows is OUTCOME_UNKNOWN, as is one still unfinished after ``timeout``.
    """
    deadline = time.monotonic() + timeout
    last_error = ""
    while True:
        try:
            state, reasons, message = client.job_state(job_id)
        except ipp.IppError as exc:
            last_error = str(exc)
        else:
            said = ", ".join(reasons) + (f" ({message.strip()})" if message.strip() else "")
            if state is None:
                return Outcome("OUTCOME_UNKNOWN", f"{label}: the printer no longer knows the job")
            if state == ipp.JOB_COMPLETED:
                return Outcome("PRINTED", f"{label} completed: {said}")
            if state == ipp.JOB_ABORTED:
                return Outcome("FAILED", f"{label} aborted by the printer: {said}")
            if state == ipp.JOB_CANCELED:
                if asked_to_cancel():
                    return Outcome("CANCELLED", f"{label} cancelled on request: {said}")
                return Outcome("FAILED", f"{label} canceled without being asked: {said}")
        if time.monotonic() >= deadline:
            why = f" (last error: {last_error})" if last_error else ""
            return Outcome("OUTCOME_UNKNOWN", f"{label} not finished after {timeout}s{why}")
        time.sleep(poll_interval)


_REQUEST_ID = re.compile(r"request id is (\S+)")
_PRINTER_LINE = re.compile(r"^printer (\S+) (.*)$")


class CupsSpooler(Spooler):
    """Prints through CUPS with its command-line clients (``lp``, ``lpstat``, ``cancel``).

    ``server`` (``host:port`` or a socket path) is passed as ``-h``; without it the clients use
    ``CUPS_SERVER`` or the local scheduler, as they always do. Where ``ipptool`` is installed and
    the scheduler is reachable over TCP, the CUPS job is followed with IPP Get-Job-Attributes on
    the queue (``ipp://SERVER/printers/QUEUE``), which tells an aborted job from a cancelled one
    and gives the job-state-reasons; the queue's capabilities and state come from
    Get-Printer-Attributes the same way. Otherwise ``lpstat`` is read.

    Outcomes: completed = PRINTED; aborted, or cancelled without the agent asking (CUPS reports a
    job the printer aborted as cancelled) = FAILED with the reason; cancelled by the agent's own
    ``cancel`` = CANCELLED; a job CUPS no longer knows = OUTCOME_UNKNOWN.
    """

    name = "cups"

    def __init__(
        self, queue: str | None = None, server: str | None = None, poll_interval: float = 0.5
    ):
        self.queue = queue
        self.server = server
        self.poll_interval = poll_interval
        self._cancelled: set[str] = set()

    def _run(self, *args: str, data: bytes | None = None, timeout: float = 30) -> str:
        command = [args[0], *(["-h", self.server] if self.server else []), *args[1:]]
        proc = subprocess.run(
            command, input=data, capture_output=True, timeout=timeout, check=False
        )
        if proc.returncode != 0:
            raise subprocess.CalledProcessError(proc.returncode, args, proc.stdout, proc.stderr)
        return proc.stdout.decode(errors="replace")

    def default_printer(self) -> str | None:
        out = self._run("lpstat", "-d")
        match = re.search(r"system default destination: (\S+)", out)
        return match.group(1) if match else None

    def _ipp(self, queue: str):
        """An IPP client for ``queue`` on this scheduler, or None where IPP cannot be used."""
        server = self.server or os.environ.get("CUPS_SERVER") or "localhost:631"
        if server.startswith("/") or ipp.ipptool_missing():
            return None
        if ":" not in server:
            server += ":631"
        return ipp.IppClient(f"ipp://{server}/printers/{queue}", timeout=10)

    def _capabilities(self, queue: str | None) -> dict[str, Any]:
        """What the queue reports it can do; empty (nothing refused) when it cannot be asked."""
        client = self._ipp(queue) if queue else None
        if client is None:
            return {}
        try:
            return ipp.describe(client.printer_attributes())[1]
        except ipp.IppError:
            return {}

    def _queue_status(self, queue: str) -> str:
        out = self._run("lpstat", "-p", queue)
        if "disabled" in out:
            return "stopped"
        return "processing" if "printing" in out else "idle"

    def describe(self) -> tuple[str, dict[str, Any]]:
        queue = self.queue or self.default_printer()
        if not queue:
            return "unknown", {"error": "CUPS has no default destination"}
        client = self._ipp(queue)
        if client is not None:
            try:
                return ipp.describe(client.printer_attributes())
            except ipp.IppError:
                pass
        return self._queue_status(queue), {}

    def queues(self) -> list[dict[str, Any]]:
        """Every queue of the scheduler as ``lpstat -p`` lists it (what enrolment offers to
        configure), the default destination marked."""
        default = self.queue or self.default_printer()
        queues = []
        for line in self._run("lpstat", "-p").splitlines():
            match = _PRINTER_LINE.match(line)
            if not match:
                continue
            name, rest = match.groups()
            if "disabled" in rest:
                status = "disabled"
            elif "printing" in rest:
                status = "printing"
            else:
                status = "idle"
            queues.append(
                {"name": name, "is_default": name == default, "status": status, "capabilities": {}}
            )
        return queues

    def printers(self) -> list[dict[str, Any]]:
        """The one queue jobs go to (``queue``, else the CUPS default destination): a job cannot
        pick another CUPS queue of the host, so no other is reported."""
        return [queue for queue in self.queues() if queue["is_default"]]

    def _destination(self, printer: str | None) -> str | None:
        """The queue of a job: the configured one. A job may name it (or, without a configured
        queue, the CUPS default destination) but no other queue of the host: those are printers
        nobody configured for this agent (``--printer NAME=cups:QUEUE`` configures more)."""
        if printer is None or printer == self.queue:
            return self.queue
        if self.queue is None and printer == self.default_printer():
            return None
        raise SpoolRejected(
            f"this agent prints to {self.queue or 'the CUPS default destination'} only, "
            f"not to the CUPS queue {printer!r} (configure it with --printer NAME=cups:QUEUE)"
        )

    def submit(self, job: SpoolJob) -> str:
        destination = self._destination(job.printer)
        document_format = base_media_type(job.content_type)
        try:
            opts = o.normalize(job.options)
            if not opts.plain:
                queue = destination or self.default_printer()
                o.check(opts, self._capabilities(queue), f"cups:{queue}")
        except o.OptionError as exc:
            raise SpoolRejected(str(exc)) from exc
        args = ["lp"]
        if destination:
            args += ["-d", destination]
        args += ["-t", job.title or job.job_id]
        args += o.lp_arguments(opts)
        args += ["-o", f"document-format={document_format}"] if document_format else []
        args.append("-")
        try:
            out = self._run(*args, data=job.data)
        except subprocess.CalledProcessError as exc:
            # lp answers non-zero before queueing anything (unknown queue, refused document).
            raise SpoolRejected(exc.stderr.decode(errors="replace").strip()) from exc
        match = _REQUEST_ID.search(out)
        if not match:
            raise RuntimeError(f"lp gave no request id: {out!r}")
        return match.group(1)

    def _listed(self, which: str, ref: str) -> str | None:
        """The ``lpstat -l`` block of ``ref`` among jobs ``which`` (completed/not-completed)."""
        queue = ref.rsplit("-", 1)[0]
        out = self._run("lpstat", "-l", "-W", which, "-o", queue)
        block: list[str] | None = None
        for line in out.splitlines():
            if line and not line[0].isspace():
                if block is not None:
                    break
                if line.split()[0] == ref:
                    block = [line]
            elif block is not None:
                block.append(line.strip())
        return "\n".join(block) if block is not None else None

    def follow(self, ref: str, timeout: float) -> Outcome:
        queue, _, number = ref.rpartition("-")
        client = self._ipp(queue) if digits(number) else None
        if client is not None:
            return follow_ipp_job(
                client,
                int(number),
                f"CUPS job {ref}",
                timeout,
                self.poll_interval,
                lambda: ref in self._cancelled,
            )
        return self._follow_lpstat(ref, timeout)

    def _follow_lpstat(self, ref: str, timeout: float) -> Outcome:
        deadline = time.monotonic() + timeout
        while True:
            finished = self._listed("completed", ref)
            if finished is not None:
                status = next(
                    (
                        ln.split(":", 1)[1].strip()
                        for ln in finished.splitlines()
                        if ln.startswith("Status:")
                    ),
                    "",
                )
                if re.search(r"cancel", status, re.IGNORECASE) and ref in self._cancelled:
                    return Outcome("CANCELLED", f"CUPS job {ref} cancelled on request")
                if re.search(r"fail|error|abort|cancel|stopped", status, re.IGNORECASE):
                    return Outcome("FAILED", f"CUPS job {ref}: {status}")
                return Outcome("PRINTED", f"CUPS job {ref} completed")
            if self._listed("not-completed", ref) is None:
                return Outcome("OUTCOME_UNKNOWN", f"CUPS no longer knows job {ref}")
            if time.monotonic() >= deadline:
                return Outcome("OUTCOME_UNKNOWN", f"CUPS job {ref} not finished after {timeout}s")
            time.sleep(self.poll_interval)

    def cancel(self, ref: str) -> bool:
        if self._listed("not-completed", ref) is None:
            return False
        self._cancelled.add(ref)
        try:
            self._run("cancel", ref)
        except subprocess.CalledProcessError:
            self._cancelled.discard(ref)
            return False
        return True
