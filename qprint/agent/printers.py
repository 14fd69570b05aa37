"""Printers by URI: one agent, several named printers, each behind a device URI.

| URI | backend |
|---|---|
| ``cups:QUEUE``, ``cups:`` | ``lp`` to a CUPS queue (``cups:`` = the CUPS default destination) |
| ``ipp://host[:port]/path``, ``ipps://...`` | IPP Everywhere directly, through ``ipptool`` |
| ``socket://host[:port]`` | raw TCP (port 9100 by default): the bytes as they are |
| ``dir:PATH`` | the directory spooler (each document written once) |
| ``null:`` | accepts and forgets |

``Printers`` is the spooler the agent uses when printers are given by URI: a job's ``printer``
picks one by name, a job without one goes to the default printer. Every backend follows the
spooler contract of ``spoolers``: ``submit`` returns a reference, raises ``SpoolRejected`` when
nothing was printed (FAILED), or anything else when the outcome is unknown (OUTCOME_UNKNOWN).
"""

import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from qprint.agent import ipp
from qprint.agent import options as o
from qprint.agent.spoolers import (
    CupsSpooler,
    DirectorySpooler,
    NullSpooler,
    Outcome,
    Spooler,
    SpoolInterrupted,
    SpoolJob,
    SpoolRejected,
    base_media_type,
    follow_ipp_job,
)

RAW_PORT = 9100


@dataclass(frozen=True)
class PrinterSpec:
    name: str
    uri: str
    default: bool = False


def check_uri(uri: str) -> str:
    """The URI's scheme; ``ValueError`` naming what is wrong with it."""
    scheme, sep, rest = uri.partition(":")
    scheme = scheme.lower()
    if not sep or scheme not in BACKENDS:
        raise ValueError(f"printer URI {uri!r}: the scheme must be one of {', '.join(BACKENDS)}")
    if scheme in ("ipp", "ipps", "socket"):
        parts = urlsplit(uri)
        if not parts.hostname:
            raise ValueError(f"printer URI {uri!r} has no host")
        try:
            parts.port  # noqa: B018 - raises on a bad port
        except ValueError as exc:
            raise ValueError(f"printer URI {uri!r}: {exc}") from None
    if scheme == "dir" and not rest:
        raise ValueError(f"printer URI {uri!r} needs a path: dir:/var/spool/qprint")
    if scheme == "cups" and rest.startswith("//"):
        raise ValueError(f"printer URI {uri!r}: write cups:QUEUE")
    return scheme


def parse_printer_argument(text: str) -> PrinterSpec:
    """``NAME=URI`` of ``--printer``."""
    name, sep, uri = text.partition("=")
    name = name.strip()
    if not sep or not name or not uri.strip():
        raise ValueError(f"--printer {text!r}: expected NAME=URI, e.g. labels=socket://10.0.0.9")
    check_uri(uri.strip())
    return PrinterSpec(name, uri.strip())


class SocketPrinter(Spooler):
    """Raw printing (AppSocket/JetDirect): connect, write every byte, half-close, wait for close.

    Nothing written yet when the connection fails (refused, connect timeout): FAILED. The
    connection broke or stalled after the first byte was handed over: OUTCOME_UNKNOWN, since the
    printer may have printed part or all of it. PRINTED once every byte was accepted and the
    printer closed its side cleanly.
    """

    name = "socket"

    def __init__(
        self,
        host: str,
        port: int = RAW_PORT,
        *,
        connect_timeout: float = 10,
        write_timeout: float = 30,
        close_timeout: float = 30,
    ):
        self.host = host
        self.port = port
        self.connect_timeout = connect_timeout
        self.write_timeout = write_timeout
        self.close_timeout = close_timeout

    def describe(self) -> tuple[str, dict[str, Any]]:
        # A raw printer is not asked: a probe connection would print an empty job on some. What
        # it can do is what the document says: one copy of the bytes, as they are.
        return "unknown", {
            "raw": True,
            "copies_max": 1,
            "sides": ["one-sided"],
            "page_ranges": False,
        }

    def submit(self, job: SpoolJob) -> str:
        opts = o.normalize(job.options)
        if not opts.plain:
            raise SpoolRejected(
                f"raw printer {self.host}:{self.port} takes the document's bytes as they are; "
                f"it cannot apply {', '.join(opts.asked())} (put them in the document)"
            )
        where = f"{self.host}:{self.port}"
        try:
            conn = socket.create_connection((self.host, self.port), timeout=self.connect_timeout)
        except OSError as exc:
            raise SpoolRejected(f"could not connect to {where}: {exc}") from exc
        sent = 0
        try:
            conn.settimeout(self.write_timeout)
            view = memoryview(job.data)
            while sent < len(view):
                sent += conn.send(view[sent : sent + 65536])
            conn.shutdown(socket.SHUT_WR)
            conn.settimeout(self.close_timeout)
            while conn.recv(4096):
                pass  # a printer may talk back (status bytes); we only wait for its close
        except OSError as exc:
            if sent == 0:
                raise SpoolRejected(f"{where} took no byte: {exc}") from exc
            raise SpoolInterrupted(
                f"connection to {where} broke after {sent} of {len(job.data)} bytes: {exc!r}"
            ) from exc
        finally:
            conn.close()
        return f"{where}:{sent}"


class IppPrinter(Spooler):
    """An IPP Everywhere printer, directly: Print-Job, then Get-Job-Attributes until it ends."""

    name = "ipp"

    def __init__(self, uri: str, *, timeout: float = 30, poll_interval: float = 1.0):
        self.uri = uri
        self.client = ipp.IppClient(uri, timeout=timeout)
        self.poll_interval = poll_interval
        self._cancelled: set[str] = set()
        self._lock = threading.Lock()
        self._capabilities: tuple[float, dict[str, Any]] | None = None

    def describe(self) -> tuple[str, dict[str, Any]]:
        status, caps = ipp.describe(self.client.printer_attributes())
        with self._lock:
            self._capabilities = (time.monotonic(), caps)
        return status, caps

    def capabilities(self) -> dict[str, Any]:
        with self._lock:
            cached = self._capabilities
        if cached and time.monotonic() - cached[0] < 60:
            return cached[1]
        try:
            return self.describe()[1]
        except ipp.IppError:
            return {}  # not known: the printer itself will refuse what it cannot do

    def submit(self, job: SpoolJob) -> str:
        try:
            opts = o.normalize(job.options)
            caps = self.capabilities()
            o.check(opts, caps, self.uri)
            o.check_format(job.content_type, caps, self.uri)
        except o.OptionError as exc:
            raise SpoolRejected(str(exc)) from exc
        document_format = base_media_type(job.content_type) or "application/octet-stream"
        try:
            job_id = self.client.print_job(
                job.data, document_format, job.title or job.job_id, o.ipp_attributes(opts)
            )
        except (ipp.IppRefused, ipp.IppUnreachable) as exc:
            raise SpoolRejected(f"{self.uri} refused the job: {exc}") from exc
        return str(job_id)

    def follow(self, ref: str, timeout: float) -> Outcome:
        return follow_ipp_job(
            self.client,
            int(ref),
            f"IPP job {ref} on {self.uri}",
            timeout,
            self.poll_interval,
            lambda: ref in self._cancelled,
        )

    def cancel(self, ref: str) -> bool:
        self._cancelled.add(ref)
        try:
            return self.client.cancel_job(int(ref))
        except ipp.IppError:
            return False


def _null(uri: str, rest: str, options: "BackendOptions") -> Spooler:
    return NullSpooler()


def _directory(uri: str, rest: str, options: "BackendOptions") -> Spooler:
    return DirectorySpooler(Path(rest))


def _cups(uri: str, rest: str, options: "BackendOptions") -> Spooler:
    return CupsSpooler(
        queue=rest or None, server=options.cups_server, poll_interval=options.poll_interval
    )


def _ipp(uri: str, rest: str, options: "BackendOptions") -> Spooler:
    return IppPrinter(uri, poll_interval=options.poll_interval)


def _socket(uri: str, rest: str, options: "BackendOptions") -> Spooler:
    parts = urlsplit(uri)
    return SocketPrinter(
        parts.hostname or "",
        parts.port or RAW_PORT,
        connect_timeout=options.socket_timeouts[0],
        write_timeout=options.socket_timeouts[1],
    )


@dataclass(frozen=True)
class BackendOptions:
    """What the agent's options say to every backend (each takes what concerns it)."""

    cups_server: str | None = None
    socket_timeouts: tuple[float, float] = (10, 30)
    poll_interval: float = 1.0


#: The printer registry: a URI scheme and the backend it makes (``factory(uri, rest, options)``,
#: ``rest`` the URI after ``scheme:``). A new backend is one entry here, and its URI's rules in
#: :func:`check_uri` when it has some.
BACKENDS: dict[str, Callable[[str, str, BackendOptions], Spooler]] = {
    "cups": _cups,
    "ipp": _ipp,
    "ipps": _ipp,
    "socket": _socket,
    "dir": _directory,
    "null": _null,
}

#: ``--spooler KIND`` (one printer, without ``--printer``) as the URI it stands for.
SPOOLER_KINDS = {"cups": "cups:", "directory": "dir:", "null": "null:"}


def spooler_uri(kind: str, *, directory: str | None = None, queue: str | None = None) -> str:
    """The printer URI of ``--spooler KIND`` (``--spool-dir``, ``--cups-queue``)."""
    if kind not in SPOOLER_KINDS:
        raise ValueError(f"unknown spooler {kind!r} ({', '.join(sorted(SPOOLER_KINDS))})")
    if kind == "directory" and not directory:
        raise ValueError("the directory spooler needs --spool-dir")
    return SPOOLER_KINDS[kind] + ((directory if kind == "directory" else queue) or "")


def backend_for(
    uri: str,
    *,
    cups_server: str | None = None,
    socket_timeouts: tuple[float, float] = (10, 30),
    poll_interval: float = 1.0,
) -> Spooler:
    """The backend of the printer URI ``uri``, from :data:`BACKENDS`."""
    scheme = check_uri(uri)
    options = BackendOptions(cups_server, socket_timeouts, poll_interval)
    return BACKENDS[scheme](uri, uri.partition(":")[2], options)


class Printers(Spooler):
    """The agent's printers by name; a job's ``printer`` picks one, none picks the default.

    References are ``NAME|REF`` so following and cancelling reach the printer that took the job.
    """

    name = "printers"

    def __init__(self, printers: dict[str, Spooler], default: str):
        if not printers:
            raise ValueError("no printer given")
        if default not in printers:
            raise ValueError(f"--default-printer {default!r} is not one of the printers")
        self.backends = printers
        self.default = default

    def _pick(self, name: str | None) -> tuple[str, Spooler]:
        name = name or self.default
        backend = self.backends.get(name)
        if backend is None:
            raise SpoolRejected(
                f"this agent has no printer named {name!r} (it has: {', '.join(self.backends)})"
            )
        return name, backend

    def printers(self) -> list[dict[str, Any]]:
        listed = []
        for name, backend in self.backends.items():
            try:
                status, caps = backend.describe()
            except Exception as exc:  # an unreachable printer is still listed, as such
                status, caps = "unreachable", {"error": str(exc)[:200]}
            listed.append(
                {
                    "name": name,
                    "is_default": name == self.default,
                    "status": status,
                    "capabilities": caps,
                }
            )
        return listed

    def submit(self, job: SpoolJob) -> str:
        name, backend = self._pick(job.printer)
        inner = SpoolJob(job.job_id, job.title, job.content_type, job.data, None, job.options)
        return f"{name}|{backend.submit(inner)}"

    def _split(self, ref: str) -> tuple[Spooler, str]:
        name, sep, inner = ref.partition("|")
        if not sep or name not in self.backends:
            raise KeyError(f"reference {ref!r} names no printer of this agent")
        return self.backends[name], inner

    def follow(self, ref: str, timeout: float) -> Outcome:
        backend, inner = self._split(ref)
        return backend.follow(inner, timeout)

    def settled(self, ref: str) -> Outcome | None:
        backend, inner = self._split(ref)
        return backend.settled(inner)

    def cancel(self, ref: str) -> bool:
        try:
            backend, inner = self._split(ref)
        except KeyError:
            return False
        return backend.cancel(inner)


def make_printers(
    specs: list[PrinterSpec],
    default: str | None,
    *,
    cups_server: str | None = None,
    socket_timeouts: tuple[float, float] = (10, 30),
    poll_interval: float = 1.0,
) -> Printers:
    names = [s.name for s in specs]
    duplicates = {n for n in names if names.count(n) > 1}
    if duplicates:
        raise ValueError(f"printer names must be unique: {', '.join(sorted(duplicates))}")
    marked = [s.name for s in specs if s.default]
    if default is None:
        if len(marked) > 1:
            raise ValueError(f"several default printers: {', '.join(marked)}")
        default = marked[0] if marked else names[0]
    backends = {
        s.name: backend_for(
            s.uri,
            cups_server=cups_server,
            socket_timeouts=socket_timeouts,
            poll_interval=poll_interval,
        )
        for s in specs
    }
    return Printers(backends, default)
