"""The journal rule for raw printers under kills: one agent process with several devices prints
to a ``socket://`` printer while it is SIGKILLed and restarted again and again, mid-document
among other moments. At the end every job is final, no document reached the printer twice, every
PRINTED job arrived once and whole, and only a submission a kill interrupted is OUTCOME_UNKNOWN.
"""

import asyncio
import collections
import os
import random
import signal
import sys
import time

import pytest

from tests.qprint.agent.raw import RecordingRawPrinter

pytestmark = pytest.mark.slow

DEVICES = 4
JOBS_PER_DEVICE = 6
SIZE = 512 * 1024


class SlowRawPrinter(RecordingRawPrinter):
    """Reads slowly, so a kill often lands mid-job; deliveries told apart by their first line."""

    def __init__(self):
        super().__init__(read_delay=0.005, chunk=32 * 1024)

    def by_job(self) -> dict[str, list[bytes]]:
        with self._lock:
            out = collections.defaultdict(list)
            for data in self.deliveries:
                out[data[:40].split(b"\n", 1)[0].decode(errors="replace")].append(data)
            return out

    def empty_connections(self) -> int:
        with self._lock:
            return sum(1 for data in self.deliveries if not data)


def document(job_index: int) -> bytes:
    head = f"JOB {job_index:06d}\n".encode()
    return head + bytes(range(256)) * ((SIZE - len(head)) // 256)


async def _start(server, tokens, state, port):
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "qprint.agent",
        "--url",
        server.base_url,
        "--tokens-file",
        str(tokens),
        "--state-dir",
        str(state),
        "--printer",
        f"raw=socket://127.0.0.1:{port}",
        "--backoff-initial",
        "0.05",
        "--backoff-max",
        "0.3",
        env=dict(os.environ),
        stderr=asyncio.subprocess.DEVNULL,
    )


async def test_no_raw_document_reaches_the_printer_twice_across_agent_kills(server, tmp_path):
    rng = random.Random(12)
    printer = SlowRawPrinter()
    devices = [server.add_device() for _ in range(DEVICES)]
    tokens = tmp_path / "tokens.txt"
    tokens.write_text("".join(f"dev-{i} {d.token}\n" for i, d in enumerate(devices)))
    jobs = {}
    for i in range(DEVICES * JOBS_PER_DEVICE):
        data = document(i)
        job = server.add_job(devices[i % DEVICES], data, content_type="application/vnd.cups-raw")
        jobs[f"JOB {i:06d}"] = (job, data)

    kills = 0
    proc = await _start(server, tokens, tmp_path / "state", printer.port)
    try:
        deadline = time.monotonic() + 60
        while any(
            j.status not in ("PRINTED", "FAILED", "OUTCOME_UNKNOWN") for j, _ in jobs.values()
        ):
            assert time.monotonic() < deadline, [j.status for j, _ in jobs.values()]
            await asyncio.sleep(rng.uniform(0.2, 0.6))
            if kills < 6:
                proc.send_signal(signal.SIGKILL)
                await proc.wait()
                kills += 1
                proc = await _start(server, tokens, tmp_path / "state", printer.port)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        printer.server.close()

    # A connection that carried no byte printed nothing: an agent killed between its connect and
    # its first write (at most one per device and kill).
    empty = printer.empty_connections()
    received = printer.by_job()
    received.pop("", None)
    statuses = collections.Counter(j.status for j, _ in jobs.values())
    report = f"statuses={dict(statuses)} kills={kills} empty_connections={empty}"
    assert kills >= 3, report
    assert empty <= kills * DEVICES, report
    for marker, deliveries in received.items():
        assert len(deliveries) == 1, f"{marker} reached the printer {len(deliveries)} times"
    for marker, (job, data) in jobs.items():
        if job.status == "PRINTED":
            assert received[marker] == [data], f"PRINTED {marker} did not arrive once, whole"
        else:
            assert job.status == "OUTCOME_UNKNOWN", report
            assert len(received.get(marker, [])) <= 1
    # One submission at a time per device: a kill interrupts at most one per device.
    assert statuses["OUTCOME_UNKNOWN"] <= kills * DEVICES, report
    assert statuses["PRINTED"] > 0, report
