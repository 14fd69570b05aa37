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

LEDGER_NAME = "spool-ledger.log"


class SpoolRejected(Exception):
    """The spooler refused the document: nothing was printed, the job FAILED."""


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

    def printers(self) -> list[dict[str, Any]]:
        return [{"name": "default", "is_default": True, "status": "idle", "capabilities": {}}]

    def submit(self, job: SpoolJob) -> str:
        raise NotImplementedError

    def follow(self, ref: str, timeout: float) -> Outcome:
        """Wait until the spooler has finished ``ref``."""
        return Outcome("PRINTED")

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
        return self.directory / f"{job.job_id}{_extension(job.content_type)}"

    def printers(self) -> list[dict[str, Any]]:
        return [
            {
                "name": "directory",
                "is_default": True,
                "status": "idle",
                "capabilities": {"path": str(self.directory)},
            }
        ]

    def submit(self, job: SpoolJob) -> str:
        final = self.path_for(job)
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


_REQUEST_ID = re.compile(r"request id is (\S+)")
_PRINTER_LINE = re.compile(r"^printer (\S+) (.*)$")


class CupsSpooler(Spooler):
    """Prints through CUPS with its command-line clients (``lp``, ``lpstat``, ``cancel``).

    ``server`` (``host:port`` or a socket path) is passed as ``-h``; without it the clients use
    ``CUPS_SERVER`` or the local scheduler, as they always do.
    """

    name = "cups"

    def __init__(
        self, queue: str | None = None, server: str | None = None, poll_interval: float = 0.5
    ):
        self.queue = queue
        self.server = server
        self.poll_interval = poll_interval

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

    def printers(self) -> list[dict[str, Any]]:
        default = self.queue or self.default_printer()
        printers = []
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
            printers.append(
                {"name": name, "is_default": name == default, "status": status, "capabilities": {}}
            )
        return printers

    def _destination(self, printer: str | None) -> str | None:
        return printer or self.queue

    def submit(self, job: SpoolJob) -> str:
        args = ["lp"]
        destination = self._destination(job.printer)
        if destination:
            args += ["-d", destination]
        args += ["-t", job.title or job.job_id]
        copies = job.options.get("copies")
        if isinstance(copies, int) and copies > 1:
            args += ["-n", str(copies)]
        duplex = job.options.get("duplex")
        if duplex:
            args += ["-o", "sides=two-sided-long-edge"]
        media = job.options.get("media")
        if isinstance(media, str) and media:
            args += ["-o", f"media={media}"]
        args += ["-o", f"document-format={job.content_type}"] if job.content_type else []
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
                if re.search(r"fail|error|abort|cancel|stopped", status, re.IGNORECASE):
                    return Outcome("FAILED", f"CUPS job {ref}: {status}")
                return Outcome("PRINTED", f"CUPS job {ref} completed")
            if time.monotonic() >= deadline:
                return Outcome("OUTCOME_UNKNOWN", f"CUPS job {ref} not finished after {timeout}s")
            time.sleep(self.poll_interval)

    def cancel(self, ref: str) -> bool:
        if self._listed("not-completed", ref) is None:
            return False
        try:
            self._run("cancel", ref)
        except subprocess.CalledProcessError:
            return False
        return True


def make_spooler(
    kind: str,
    *,
    directory: str | None = None,
    queue: str | None = None,
    cups_server: str | None = None,
) -> Spooler:
    if kind == "null":
        return NullSpooler()
    if kind == "directory":
        if not directory:
            raise ValueError("the directory spooler needs --spool-dir")
        return DirectorySpooler(directory)
    if kind == "cups":
        return CupsSpooler(queue=queue, server=cups_server)
    raise ValueError(f"unknown spooler {kind!r} (cups, directory, null)")
