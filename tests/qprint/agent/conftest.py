"""Fixtures of the agent's protocol-level tests: a fake server and agents run in this loop."""

import asyncio

import pytest

from qprint.agent.config import AgentConfig, DeviceConfig, journal_path
from qprint.agent.device import DeviceAgent
from qprint.agent.spoolers import DirectorySpooler, Spooler
from tests.qprint.agent.fake_server import FakeDevice, FakeServer


class CountingSpooler(DirectorySpooler):
    """The directory spooler, counting every submission it is asked for."""

    def __init__(self, directory):
        super().__init__(directory)
        self.submitted: list[str] = []

    def submit(self, job):
        self.submitted.append(job.job_id)
        return super().submit(job)


class AgentRun:
    """An agent for one device, running as a task of the test's event loop."""

    def __init__(
        self,
        server: FakeServer,
        device: FakeDevice,
        state_dir,
        spooler: Spooler,
        urls: list[str] | None = None,
        **settings,
    ):
        self.config = AgentConfig(
            urls=urls or [server.base_url],
            devices=[DeviceConfig("dev", device.token, journal_path(state_dir, "dev"))],
            backoff_initial=0.05,
            backoff_max=0.2,
            shutdown_grace=5,
            **settings,
        )
        self.agent = DeviceAgent(self.config, self.config.devices[0], spooler)
        self.task = asyncio.create_task(self.agent.run())

    async def stop(self) -> str:
        self.agent.request_stop()
        return await asyncio.wait_for(self.task, 10)


@pytest.fixture
async def server():
    s = await FakeServer(heartbeat=0.5).start()
    yield s
    await s.stop()


@pytest.fixture
def spooler(tmp_path):
    return CountingSpooler(tmp_path / "printed")


@pytest.fixture
async def start_agent(server, spooler, tmp_path):
    runs: list[AgentRun] = []

    def start(device: FakeDevice, **kwargs) -> AgentRun:
        run = AgentRun(server, device, tmp_path / "state", kwargs.pop("spooler", spooler), **kwargs)
        runs.append(run)
        return run

    yield start
    for run in runs:
        if not run.task.done():
            await run.stop()
