"""A CUPS scheduler of the test's own, with a ``cups-pdf`` queue writing into a test directory.

Debian's ``cups`` and ``printer-driver-cups-pdf`` provide the binaries; this starts a private
``cupsd`` on a spare loopback port with its own configuration, spool and logs (the machine's CUPS,
if any, is left alone). cups-pdf reads a per-queue configuration,
``/etc/cups/cups-pdf-<name>.conf`` for the device URI ``cups-pdf:/<name>``, which points its
output at the test's directory; that file is removed again on ``stop``.
"""

import os
import shutil
import subprocess
import tempfile
import uuid
from pathlib import Path

from qprint.agent.ipp import IppClient
from tests.processes import free_port, port_open
from tests.waiting import wait_until

CUPS_PDF_BACKEND = Path("/usr/lib/cups/backend/cups-pdf")
CUPS_PDF_PPD = Path("/usr/share/ppd/cups-pdf/CUPS-PDF_opt.ppd")
CUPS_PDF_CONFIG_DIR = Path("/etc/cups")


def unavailable_reason() -> str | None:
    """Why a private CUPS with cups-pdf cannot run here, or None."""
    for binary in ("cupsd", "lpadmin", "lp", "lpstat"):
        if shutil.which(binary) is None and not Path("/usr/sbin", binary).exists():
            return f"{binary} is not installed (apt-get install cups printer-driver-cups-pdf)"
    if not CUPS_PDF_BACKEND.exists() or not CUPS_PDF_PPD.exists():
        return "cups-pdf is not installed (apt-get install printer-driver-cups-pdf)"
    if os.geteuid() != 0:
        return "cupsd and the cups-pdf backend need root to run a private scheduler"
    if not os.access(CUPS_PDF_CONFIG_DIR, os.W_OK):
        return f"{CUPS_PDF_CONFIG_DIR} is not writable (cups-pdf's per-queue configuration)"
    return None


def _binary(name: str) -> str:
    return shutil.which(name) or str(Path("/usr/sbin", name))


class CupsServer:
    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="qprint-cups-"))
        self.port = free_port()
        self.queue = f"QPRINT{uuid.uuid4().hex[:8].upper()}"
        self.pdf_name = self.queue.lower()
        self.output = self.root / "out"
        self.proc: subprocess.Popen | None = None
        self.pdf_config = CUPS_PDF_CONFIG_DIR / f"cups-pdf-{self.pdf_name}.conf"

    @property
    def server(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _write_config(self) -> None:
        conf = self.root / "conf"
        for sub in ("conf", "spool", "cache", "state", "log", "tmp", "out"):
            (self.root / sub).mkdir(exist_ok=True)
        self.root.chmod(0o755)
        (self.root / "tmp").chmod(0o1777)  # filters run as lp
        self.output.chmod(0o1777)
        (conf / "cupsd.conf").write_text(
            f"Listen 127.0.0.1:{self.port}\n"
            "LogLevel warn\nWebInterface No\nDefaultAuthType None\n"
            "<Location />\n  Order allow,deny\n  Allow all\n</Location>\n"
            "<Location /admin>\n  Order allow,deny\n  Allow all\n</Location>\n"
            "<Policy default>\n  <Limit All>\n    Order deny,allow\n  </Limit>\n</Policy>\n"
        )
        r = self.root
        (conf / "cups-files.conf").write_text(
            f"ServerRoot {conf}\nRequestRoot {r / 'spool'}\nCacheDir {r / 'cache'}\n"
            f"StateDir {r / 'state'}\nTempDir {r / 'tmp'}\nPrintcap {r / 'printcap'}\n"
            f"AccessLog {r / 'log/access_log'}\nErrorLog {r / 'log/error_log'}\n"
            f"PageLog {r / 'log/page_log'}\nUser lp\nGroup lp\nSystemGroup root\n"
        )
        self.pdf_config.write_text(
            f"Out {self.output}\nAnonDirName {self.output}\nLog {r / 'log'}\nGrp lp\nLabel 2\n"
        )

    def add_queue(self, name: str, uri: str, *options: str) -> str:
        """An IPP Everywhere queue on ``uri`` (``lpadmin -m everywhere``), for the agent's
        ``cups:`` printers; ``options`` are further ``lpadmin`` arguments."""
        subprocess.run(
            [
                _binary("lpadmin"),
                "-h",
                self.server,
                "-p",
                name,
                "-E",
                "-v",
                uri,
                "-m",
                "everywhere",
                *options,
            ],
            check=True,
            capture_output=True,
            timeout=60,
        )
        # cupsd writes the queue's PPD from the printer's attributes a moment later.
        queue = IppClient(f"ipp://{self.server}/printers/{name}", timeout=5)
        wait_until(
            lambda: "Everywhere" in str(queue.printer_attributes().get("printer-make-and-model")),
            60,
            message=f"the IPP Everywhere PPD of {name}",
        )
        return name

    def start(self, timeout: float = 15) -> "CupsServer":
        self._write_config()
        conf = self.root / "conf"
        self.proc = subprocess.Popen(
            [
                _binary("cupsd"),
                "-f",
                "-c",
                str(conf / "cupsd.conf"),
                "-s",
                str(conf / "cups-files.conf"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=open(self.root / "log/stderr", "wb"),  # noqa: SIM115 - kept by the process
            start_new_session=True,
        )
        wait_until(lambda: port_open(self.port), timeout, message=f"cupsd on {self.port}")
        subprocess.run(
            [
                _binary("lpadmin"),
                "-h",
                self.server,
                "-p",
                self.queue,
                "-E",
                "-v",
                f"cups-pdf:/{self.pdf_name}",
                "-P",
                str(CUPS_PDF_PPD),
            ],
            check=True,
            capture_output=True,
            timeout=30,
        )
        return self

    def pdfs(self) -> list[Path]:
        return sorted(self.output.glob("*.pdf"))

    def log(self) -> str:
        path = self.root / "log/error_log"
        return path.read_text(errors="replace") if path.exists() else ""

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.pdf_config.unlink(missing_ok=True)
        shutil.rmtree(self.root, ignore_errors=True)


def minimal_pdf(text: str = "qprint") -> bytes:
    """A small, valid one-page PDF (CUPS' filters reject a bare header)."""
    stream = f"BT /F1 24 Tf 72 720 Td ({text}) Tj ET".encode()
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R"
        b" /Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    for offset in offsets:
        out += b"%010d 00000 n \n" % offset
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        xref,
    )
    return bytes(out)


def everywhere_queue(printer_uri: str) -> tuple["CupsServer", str]:
    """A started private CUPS with an IPP Everywhere queue ``EVE`` on ``printer_uri`` (a failing
    printer aborts the job: the default, stop-printer, would hold it forever); or the test
    skipped (failed when required) with the reason. The caller stops the server."""
    from tests.qprint.agent.ippeve import unavailable

    reason = unavailable_reason()
    if reason:
        unavailable("CUPS", reason)
    server = CupsServer()
    try:
        server.start()
        queue = server.add_queue("EVE", printer_uri, "-o", "printer-error-policy=abort-job")
    except Exception as exc:
        log = server.log()
        server.stop()
        unavailable("CUPS", f"the queue was not made: {exc!r}\n{log}")
    return server, queue
