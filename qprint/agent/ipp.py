"""IPP requests through CUPS's ``ipptool`` (Debian ``cups-ipp-utils``), answers read as plists.

Why ``ipptool`` and not a Python library (docs/AGENT.md, "IPP"): it is the IPP client of CUPS
itself, kept with the scheduler and used by the IPP Everywhere self-certification, it speaks
``ipp://`` and ``ipps://``, chunking and TLS, and its ``-X`` output is a property list that
``plistlib`` reads. The agent gains no Python dependency.

Each request is a small ipptool test file written here; every value that comes from a job
(title, format, media...) is passed as an ipptool variable (``-d vN=...``), so it is never parsed
as test-file syntax.
"""

import plistlib
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from qprint.agent.options import ORIENTATIONS

# IPP job-state enum (RFC 8011 5.3.7).
JOB_PENDING, JOB_HELD, JOB_PROCESSING, JOB_STOPPED = 3, 4, 5, 6
JOB_CANCELED, JOB_ABORTED, JOB_COMPLETED = 7, 8, 9
FINAL_JOB_STATES = frozenset({JOB_CANCELED, JOB_ABORTED, JOB_COMPLETED})
# printer-state enum.
PRINTER_STATES = {3: "idle", 4: "processing", 5: "stopped"}

PRINTER_ATTRIBUTES = (
    "printer-state",
    "printer-state-reasons",
    "printer-state-message",
    "printer-is-accepting-jobs",
    "printer-make-and-model",
    "media-supported",
    "media-ready",
    "media-default",
    "sides-supported",
    "color-supported",
    "print-color-mode-supported",
    "document-format-supported",
    "copies-supported",
    "page-ranges-supported",
    "orientation-requested-supported",
)
JOB_ATTRIBUTES = ("job-state", "job-state-reasons", "job-state-message")
_UNSAFE = re.compile(r"[\x00-\x1f\x7f\"\\$]")


class IppError(Exception):
    """The request's outcome is not known (the connection broke, an unreadable answer)."""


class IppUnreachable(IppError):
    """The printer could not be reached: nothing was sent."""


class IppRefused(Exception):
    """The printer answered with an error status: nothing was accepted."""

    def __init__(self, status: str, message: str = ""):
        super().__init__(f"{status}{': ' + message if message else ''}")
        self.status = status
        self.message = message


@dataclass
class IppResponse:
    status: str
    attributes: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status.startswith("successful-ok")


def as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    return list(value) if isinstance(value, list) else [value]


def ipptool_missing() -> bool:
    return shutil.which("ipptool") is None


class IppClient:
    """One IPP printer (``ipp://host:port/path`` or ``ipps://...``), one request per call."""

    def __init__(self, uri: str, *, timeout: float = 30, user: str = "qprint"):
        self.uri = uri
        self.timeout = timeout
        self.user = user

    def request(
        self,
        operation: str,
        operation_attributes: list[tuple[str, str, Any]] = (),
        job_attributes: list[tuple[str, str, Any]] = (),
        document: Path | None = None,
    ) -> IppResponse:
        """Send one request; ``(value tag, name, value)`` triples become ``ATTR`` lines."""
        variables: dict[str, str] = {}

        def line(tag: str, name: str, value: str | tuple[str, ...]) -> str:
            keys = []
            for one in value if isinstance(value, tuple) else (value,):
                key = f"v{len(variables)}"
                variables[key] = _UNSAFE.sub(" ", one)[:1023]
                keys.append(f'"${key}"')
            return f"ATTR {tag} {name} {','.join(keys)}\n"

        text = (
            "{\n"
            f"NAME {operation}\n"
            f"OPERATION {operation}\n"
            "GROUP operation-attributes-tag\n"
            "ATTR charset attributes-charset utf-8\n"
            "ATTR naturalLanguage attributes-natural-language en\n"
            "ATTR uri printer-uri $uri\n"
        )
        text += line("name", "requesting-user-name", self.user)
        for attribute in operation_attributes:
            text += line(*attribute)
        if job_attributes:
            text += "GROUP job-attributes-tag\n"
            for attribute in job_attributes:
                text += line(*attribute)
        if document is not None:
            text += "FILE $filename\n"
        text += "}\n"
        with tempfile.NamedTemporaryFile("w", suffix=".test", prefix="qprint-ipp-") as test:
            test.write(text)
            test.flush()
            command = ["ipptool", "-X", "-T", str(max(1, int(self.timeout)))]
            if document is not None:
                command += ["-f", str(document)]
            for key, value in variables.items():
                command += ["-d", f"{key}={value}"]
            command += [self.uri, test.name]
            try:
                proc = subprocess.run(
                    command, capture_output=True, timeout=self.timeout + 30, check=False
                )
            except subprocess.TimeoutExpired as exc:
                raise IppError(f"{operation}: no answer from {self.uri} in time") from exc
            except FileNotFoundError as exc:
                raise IppUnreachable(
                    "ipptool is not installed (apt-get install cups-ipp-utils)"
                ) from exc
        return self._parse(operation, proc)

    def _parse(self, operation: str, proc: subprocess.CompletedProcess) -> IppResponse:
        try:
            plist = plistlib.loads(proc.stdout)
        except Exception as exc:
            stderr = proc.stderr.decode(errors="replace").strip()
            raise IppError(f"{operation}: unreadable ipptool output ({stderr})") from exc
        tests = plist.get("Tests") or []
        status = tests[0].get("StatusCode") if tests else None
        if not status:
            message = str(plist.get("ErrorMessage") or proc.stderr.decode(errors="replace"))
            message = message.strip()
            if "Unable to connect" in message or "Unable to open" in message:
                raise IppUnreachable(f"{self.uri}: {message}")
            raise IppError(f"{operation} to {self.uri}: {message or 'no answer'}")
        attributes: dict[str, Any] = {}
        for group in tests[0].get("ResponseAttributes") or []:
            for name, value in group.items():
                attributes.setdefault(name, value)
        return IppResponse(str(status), attributes)

    # -- operations -------------------------------------------------------------------------

    def print_job(
        self,
        data: bytes,
        content_type: str,
        title: str,
        job_attributes: list[tuple[str, str, str]],
    ) -> int:
        """Print-Job; the job id. ``IppRefused``/``IppUnreachable``: nothing was printed."""
        with tempfile.NamedTemporaryFile(prefix="qprint-doc-") as document:
            document.write(data)
            document.flush()
            response = self.request(
                "Print-Job",
                [
                    ("name", "job-name", title or "qprint job"),
                    ("mimeMediaType", "document-format", content_type),
                ],
                job_attributes,
                document=Path(document.name),
            )
        if not response.ok:
            raise IppRefused(response.status, str(response.attributes.get("status-message", "")))
        job_id = response.attributes.get("job-id")
        if not isinstance(job_id, int):
            raise IppError(f"Print-Job to {self.uri} answered without a job-id")
        return job_id

    def job_state(self, job_id: int) -> tuple[int | None, list[str], str]:
        """``(job-state, job-state-reasons, job-state-message)``; state None: no such job."""
        response = self.request(
            "Get-Job-Attributes",
            [
                ("integer", "job-id", str(job_id)),
                ("keyword", "requested-attributes", JOB_ATTRIBUTES),
            ],
        )
        if response.status == "client-error-not-found":
            return None, [], ""
        if not response.ok:
            raise IppError(f"Get-Job-Attributes {job_id}: {response.status}")
        a = response.attributes
        state = a.get("job-state")
        return (
            state if isinstance(state, int) else None,
            [str(r) for r in as_list(a.get("job-state-reasons")) if r != "none"],
            str(a.get("job-state-message") or ""),
        )

    def cancel_job(self, job_id: int) -> bool:
        response = self.request("Cancel-Job", [("integer", "job-id", str(job_id))])
        return response.ok

    def printer_attributes(self) -> dict[str, Any]:
        response = self.request(
            "Get-Printer-Attributes",
            [("keyword", "requested-attributes", PRINTER_ATTRIBUTES)],
        )
        if not response.ok:
            raise IppError(f"Get-Printer-Attributes: {response.status}")
        return response.attributes


def describe(attributes: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """A printer's ``(status, capabilities)`` from its Get-Printer-Attributes answer.

    ``status`` is ``idle``/``processing``/``stopped``; the capabilities carry the keys that
    ``options.check`` reads, plus ``state_reasons``: the IPP ``printer-state-reasons`` as the
    printer gave them (``media-empty-error``, ``offline-report``...).
    """
    a = attributes
    status = PRINTER_STATES.get(a.get("printer-state"), "unknown")
    reasons = [str(r) for r in as_list(a.get("printer-state-reasons")) if r != "none"]
    color_modes = [str(m) for m in as_list(a.get("print-color-mode-supported"))]
    caps: dict[str, Any] = {
        "media": sorted({str(m) for m in as_list(a.get("media-supported"))}),
        "sides": [str(s) for s in as_list(a.get("sides-supported"))] or ["one-sided"],
        "color": bool(a.get("color-supported")) or "color" in color_modes,
        "color_modes": color_modes,
        "document_formats": [str(f) for f in as_list(a.get("document-format-supported"))],
        "state_reasons": reasons,
    }
    copies = a.get("copies-supported")
    if isinstance(copies, dict) and isinstance(copies.get("upper"), int):
        caps["copies_max"] = copies["upper"]
    if "page-ranges-supported" in a:
        caps["page_ranges"] = bool(a["page-ranges-supported"])
    orientations = as_list(a.get("orientation-requested-supported"))
    if orientations:
        names = {v: k for k, v in ORIENTATIONS.items()}
        caps["orientations"] = [names[o] for o in orientations if o in names]
    if a.get("media-default"):
        caps["media_default"] = str(a["media-default"])
    if a.get("printer-state-message"):
        caps["state_message"] = str(a["printer-state-message"])
    if a.get("printer-make-and-model"):
        caps["make_and_model"] = str(a["printer-make-and-model"])
    if a.get("printer-is-accepting-jobs") is False:
        caps["accepting_jobs"] = False
    return status, caps
