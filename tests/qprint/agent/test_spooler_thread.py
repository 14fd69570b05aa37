"""A device's spooler calls run on the device's own threads: the devices of one process following
long jobs (a CUPS or IPP printer printing) hold up neither another device's submission, nor a
cancel of the job being followed, nor the event loop's name lookups (asyncio's default executor,
which the spooler's calls no longer take)."""

import asyncio
import os
import threading

from qprint.agent.spooler_thread import AsyncSpooler
from qprint.agent.spoolers import Outcome, Spooler, SpoolJob
from tests.waiting import eventually


class PrintingSpooler(Spooler):
    """A spooler whose every job prints until the test lets it finish; shared by the devices."""

    def __init__(self) -> None:
        self.finish = threading.Event()
        self.followed: set[str] = set()
        self.cancelled: list[str] = []
        self.lock = threading.Lock()

    def submit(self, job: SpoolJob) -> str:
        return f"ref-{job.job_id}"

    def follow(self, ref: str, timeout: float) -> Outcome:
        with self.lock:
            self.followed.add(ref)
        self.finish.wait(timeout)
        return Outcome("CANCELLED" if ref in self.cancelled else "PRINTED")

    def cancel(self, ref: str) -> bool:
        self.cancelled.append(ref)
        return True


async def test_devices_following_long_jobs_hold_up_no_other_call_of_the_process():
    spooler = PrintingSpooler()
    # More devices than asyncio's default executor has threads, each following a job.
    following = min(32, (os.cpu_count() or 1) + 4) + 1
    devices = [AsyncSpooler(spooler, f"dev-{i}") for i in range(following)]
    other = AsyncSpooler(spooler, "other")
    follows = [
        asyncio.ensure_future(device.follow(f"ref-{i}", 30)) for i, device in enumerate(devices)
    ]
    try:
        await eventually(
            lambda: len(spooler.followed) == following, message="every device following its job"
        )
        job = SpoolJob("job-1", "a job", "application/pdf", b"%PDF-1.4\n", None, {})
        assert await asyncio.wait_for(other.submit(job), 5) == "ref-job-1"
        # A cancel reaches the spooler while its device follows the job it cancels.
        assert await asyncio.wait_for(devices[0].cancel("ref-0"), 5) is True
        # The loop's name lookups (a reconnect's) run on the default executor: still free.
        await asyncio.wait_for(asyncio.get_running_loop().getaddrinfo("localhost", 80), 5)
        assert not any(f.done() for f in follows)
    finally:
        spooler.finish.set()
    outcomes = await asyncio.wait_for(asyncio.gather(*follows), 10)
    assert [o.status for o in outcomes] == ["CANCELLED"] + ["PRINTED"] * (following - 1)
    for device in (*devices, other):
        device.close()
