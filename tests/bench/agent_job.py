"""What the agent spends on one pushed job, in its own process: an assignment whose document came
inline, taken as the device's work loop takes it at the assignment's wakeup (the outbox flushed,
the jobs put aside resumed, then ``JobRunner.handle``), its journal on this machine's disk (three
commits with an fsync), the null printer, the reports sent on a socket whose server answers at
once, to the job's last acknowledgement. No node, no network: the agent's own share of a job,
which the end-to-end benchmark reads only beside every other process of the run.

:func:`pushed_job` is one way of ``tests.bench.handoff`` (``agent_job``, CPU per job). Run alone:

    python -m tests.bench.agent_job [jobs]                  # CPU per job (all threads)
    python -m tests.bench.agent_job --instructions [jobs]   # instructions per job, under valgrind

``--instructions`` runs this module twice under ``valgrind --tool=callgrind``, after a run
outside the count (the same warm-up, then no job and ``jobs`` jobs), and prints the instructions
per job, the difference over the jobs: a count that repeats from run to run whatever else the
machine does (to within a tenth of a percent here), so two versions of the agent compare in one
reading each. Alone, no logging is configured (the agent's INFO lines are not written); in
``tests.bench.handoff`` they go where the example project sends them. The agent runs without
Django: nothing here needs a database.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import tempfile
import uuid
from pathlib import Path

from qprint.core import event_loop
from tests.bench.machine import cpu_of_jobs, per_job_main

WARM_UP = 100


class AnsweringSocket:
    """The agent's side of a device socket whose server records every event at once."""

    def __init__(self) -> None:
        from qprint.agent.operations import SocketOperations

        self.ops = SocketOperations()
        self.ops.attach(self, frozenset({"claim", "event"}))

    async def send(self, text: str) -> None:
        frame = json.loads(text)
        answer = {"type": "event_recorded", "request_id": frame["request_id"], "status": 201,
                  "event": {"event_id": frame["event_id"]}}  # fmt: skip
        asyncio.get_running_loop().call_soon(self.ops.deliver, answer)


def pushed_job(journal):
    """``run()``: one pushed job on ``journal`` (an ``AsyncJournal``), from its assignment to its
    last acknowledgement."""
    import httpx

    from qprint.agent.operations import DeviceApi
    from qprint.agent.protocol import Endpoints
    from qprint.agent.spooler_thread import AsyncSpooler
    from qprint.agent.spoolers import NullSpooler
    from qprint.agent.worker import DONE, Assignment, JobRunner, Reporter

    endpoints = Endpoints.from_url("http://node.test/qprint/")
    http = httpx.AsyncClient(transport=httpx.MockTransport(lambda _: httpx.Response(204)))
    api = DeviceApi(http, AnsweringSocket().ops)
    spooler = AsyncSpooler(NullSpooler(), "bench")
    runner = JobRunner("bench", journal, http, Reporter("bench", journal, http, api), spooler, 5)
    document = b"%PDF-1.4\n" + b"0" * 2048
    inline = {"size": len(document), "sha256": hashlib.sha256(document).hexdigest(),
              "content_type": "application/pdf",
              "document_base64": base64.b64encode(document).decode()}  # fmt: skip

    async def run() -> None:
        body = {"job_id": str(uuid.uuid4()), "claim_id": str(uuid.uuid4()), **inline}
        # What the device's work loop does at the assignment's wakeup before it handles it
        # (``WorkLoop._work``): the outbox flushed, the jobs put aside resumed.
        assert await runner.reporter.flush(endpoints)
        assert await runner.resume_received(endpoints)
        assert await runner.handle(endpoints, Assignment.from_body(body)) == DONE

    return run


async def _jobs(count: int) -> float:
    """CPU seconds of ``count`` pushed jobs, after :data:`WARM_UP` of them."""
    from qprint.agent.journal_thread import AsyncJournal

    with tempfile.TemporaryDirectory(prefix="bench-agent-job-") as directory:
        journal = AsyncJournal(Path(directory) / "bench.journal.sqlite3", "bench")
        try:
            return await cpu_of_jobs(pushed_job(journal), count, WARM_UP)
        finally:
            await journal.close()


def main() -> None:
    per_job_main(
        "tests.bench.agent_job",
        __doc__.split("\n\n")[0],
        lambda jobs: event_loop.run(_jobs(jobs)),  # the agent's loop: uvloop's, when installed
    )


if __name__ == "__main__":
    main()
