"""An IPP Everywhere printer nobody here wrote: CUPS's ``ippeveprinter``, in a network of its own.

``ippeveprinter`` (Debian ``cups-ipp-utils``) will not start without DNS-SD, and DNS-SD announces
on the network. So it runs in a network namespace of its own (``unshare -n -m``: only a loopback
interface, and private ``/run/dbus`` and ``/run/avahi-daemon``), with a private system bus
(``dbus-daemon`` with a configuration written here) and an ``avahi-daemon`` limited to that
loopback. Nothing it announces can leave the namespace. The test reaches the printer through a
Unix socket in the shared filesystem: a relay inside the namespace forwards it to the printer's
port, a relay outside listens on 127.0.0.1 (``tests/qprint/agent/relay.py``).

The printer runs a ``-c`` command for every job that keeps the document and the ``IPP_*``
environment it was given, and that fails the job like a printer out of paper
(``STATE: +media-empty-error``, exit 1) while the file ``fail-next`` exists, and that takes
10 s per job while the file ``slow`` exists (time to cancel it).
"""

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.processes import free_port, port_open
from tests.waiting import wait_until

DBUS_CONF = """<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>system</type>
  <listen>unix:path=/run/dbus/system_bus_socket</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="*"/>
    <allow own="*"/>
    <allow send_destination="*"/>
    <allow receive_sender="*"/>
  </policy>
</busconfig>
"""

AVAHI_CONF = """[server]
use-ipv4=yes
use-ipv6=no
allow-interfaces=lo
enable-dbus=yes
[publish]
publish-hinfo=no
publish-workstation=no
"""

# Run by ippeveprinter for each job: $1 is the document, IPP_* the job's attributes.
PRINT_COMMAND = """#!/bin/sh
out="{root}/jobs/$(date +%s%N)"
mkdir -p "$out"
cp "$1" "$out/document"
env | grep '^IPP_' | sort > "$out/env.tmp"
mv "$out/env.tmp" "$out/env"
[ -e "{root}/slow" ] && sleep 10
if [ -e "{root}/fail-next" ]; then
    echo "STATE: +media-empty-error" >&2
    echo "ERROR: out of paper" >&2
    exit 1
fi
echo "STATE: -media-empty-error" >&2
exit 0
"""

INNER = """set -e
ip link set lo up
mkdir -p /run/dbus /run/avahi-daemon
mount -t tmpfs tmpfs /run/dbus
mount -t tmpfs tmpfs /run/avahi-daemon
dbus-daemon --config-file={root}/dbus.conf --nofork --nopidfile &
i=0
while [ ! -S /run/dbus/system_bus_socket ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i+1)); done
avahi-daemon -f {root}/avahi.conf --no-drop-root --no-chroot --no-rlimits &
ippeveprinter -r off -p {port} -k -d {root}/spool -c {root}/print-command \\
    {options} "{name}" &
exec {python} -m tests.qprint.agent.relay unix-to-tcp {root}/printer.sock {port}
"""

FORMATS = "application/pdf,image/pwg-raster,image/urf,text/plain"


def _missing(binary: str) -> bool:
    return shutil.which(binary) is None and not Path("/usr/sbin", binary).exists()


def unavailable_reason() -> str | None:
    """Why the namespaced ippeveprinter cannot run here, or None."""
    for binary, package in (
        ("ippeveprinter", "cups-ipp-utils"),
        ("ipptool", "cups-ipp-utils"),
        ("avahi-daemon", "avahi-daemon"),
        ("dbus-daemon", "dbus-daemon"),
        ("unshare", "util-linux"),
        ("ip", "iproute2"),
    ):
        if _missing(binary):
            return f"{binary} is not installed (apt-get install {package})"
    if os.geteuid() != 0:
        return "a network namespace of its own needs root"
    probe = subprocess.run(["unshare", "-n", "-m", "true"], capture_output=True, check=False)
    if probe.returncode != 0:
        return f"unshare -n -m is not allowed here: {probe.stderr.decode().strip()}"
    return None


class IppEvePrinter:
    def __init__(self, name: str = "qprint-test", attributes: str | None = None) -> None:
        """``attributes``: an ``ippeveprinter -a`` file (ipptool syntax) of printer attributes
        that replace the defaults, e.g. a label printer's ``media-supported``."""
        self.root = Path(tempfile.mkdtemp(prefix="qprint-ippeve-"))
        self.name = name
        self.attributes = attributes
        self.port = free_port()  # outside: the relay on 127.0.0.1
        self.inner_port = 8631  # inside the namespace: the printer itself
        self.proc: subprocess.Popen | None = None
        self.relay: subprocess.Popen | None = None

    @property
    def uri(self) -> str:
        return f"ipp://127.0.0.1:{self.port}/ipp/print"

    def start(self, timeout: float = 20) -> "IppEvePrinter":
        r = self.root
        for sub in ("spool", "jobs"):
            (r / sub).mkdir()
        r.chmod(0o755)
        (r / "dbus.conf").write_text(DBUS_CONF)
        (r / "avahi.conf").write_text(AVAHI_CONF)
        command = r / "print-command"
        command.write_text(PRINT_COMMAND.format(root=r))
        command.chmod(0o755)
        if self.attributes:
            (r / "attributes.conf").write_text(self.attributes)
        repo = Path(__file__).resolve().parents[3]
        (r / "inner.sh").write_text(
            INNER.format(
                root=r,
                port=self.inner_port,
                # ippeveprinter takes an attributes file instead of these options, not with them
                options=f"-a {r / 'attributes.conf'}"
                if self.attributes
                else f'-f {FORMATS} -2 -M qprint -m "Test Printer"',
                name=self.name,
                python=sys.executable,
            )
        )
        self.proc = subprocess.Popen(
            ["unshare", "-n", "-m", "sh", str(r / "inner.sh")],
            cwd=repo,
            stdout=open(r / "printer.log", "wb"),  # noqa: SIM115 - kept by the process
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        wait_until(lambda: (r / "printer.sock").exists(), timeout, message="printer relay")
        self.relay = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.qprint.agent.relay",
                "tcp-to-unix",
                str(self.port),
                str(r / "printer.sock"),
            ],
            cwd=repo,
            start_new_session=True,
        )
        wait_until(lambda: port_open(self.port), timeout, message="relay port")
        wait_until(self._answers, timeout, message=f"ippeveprinter: {self.log()}")
        return self

    def _answers(self) -> bool:
        probe = subprocess.run(
            ["ipptool", "-T", "2", self.uri, "get-printer-attributes.test"],
            capture_output=True,
            check=False,
        )
        return probe.returncode == 0

    def fail_jobs(self, fail: bool) -> None:
        flag = self.root / "fail-next"
        if fail:
            flag.touch()
        else:
            flag.unlink(missing_ok=True)

    def slow_jobs(self, slow: bool) -> None:
        flag = self.root / "slow"
        if slow:
            flag.touch()
        else:
            flag.unlink(missing_ok=True)

    def jobs(self) -> list[dict]:
        """What the print command saw, oldest first: ``{"document": bytes, "env": {...}}``."""
        jobs = []
        for d in sorted((self.root / "jobs").iterdir()):
            if not (d / "env").exists():
                continue
            env = dict(
                line.split("=", 1) for line in (d / "env").read_text().splitlines() if "=" in line
            )
            jobs.append({"document": (d / "document").read_bytes(), "env": env})
        return jobs

    def log(self) -> str:
        path = self.root / "printer.log"
        return path.read_text(errors="replace")[-3000:] if path.exists() else ""

    def stop(self) -> None:
        for proc in (self.relay, self.proc):
            if proc is None or proc.poll() is not None:
                continue
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
        # the namespace's daemons were in the same process group; give them a moment to go
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and self.proc is not None:
            try:
                os.killpg(self.proc.pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.05)
        shutil.rmtree(self.root, ignore_errors=True)


def unavailable(what: str, reason: str) -> None:
    """Skip the test (fail it under ``QPRINT_REQUIRE_SERVICES=1``): ``what`` cannot run here."""
    import pytest

    from tests import services

    if services.required():
        pytest.fail(f"QPRINT_REQUIRE_SERVICES=1 but {what} cannot run: {reason}")
    pytest.skip(f"{what} cannot run here: {reason}")


def started(printer: IppEvePrinter) -> IppEvePrinter:
    """``printer`` started, or the test skipped (failed when required) with the reason."""
    reason = unavailable_reason()
    if reason:
        unavailable("ippeveprinter", reason)
    try:
        printer.start()
    except Exception as exc:
        log = printer.log()
        printer.stop()
        unavailable("ippeveprinter", f"it did not start: {exc!r}\n{log}")
    return printer
