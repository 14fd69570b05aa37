"""Run several devices in one process (``--devices N``): the agent as a load generator.

Every device has its own token, journal, HTTP client and socket; they share the event loop and
the spooler (the directory spooler names files by job id, so devices never collide).
"""

import asyncio
import logging

from qprint.agent.config import AgentConfig
from qprint.agent.device import CREDENTIALS_REFUSED, DISABLED, DeviceAgent
from qprint.agent.spoolers import Spooler

logger = logging.getLogger("qprint.agent")


class Fleet:
    """The devices of one process, started together and stopped together."""

    def __init__(self, config: AgentConfig, spooler: Spooler):
        self.config = config
        self.agents = [DeviceAgent(config, device, spooler) for device in config.devices]

    def request_stop(self) -> None:
        for agent in self.agents:
            agent.request_stop()

    async def run(self) -> int:
        """Run every device until each has stopped; the exit status of the process.

        0: stopped on request; 2: a device's credentials were refused; 3: a device was disabled.
        """
        logger.info(
            "agent_started devices=%d urls=%s spooler=%s",
            len(self.agents),
            ",".join(self.config.urls),
            self.config.spooler,
        )
        reasons = await asyncio.gather(*(agent.run() for agent in self.agents))
        if CREDENTIALS_REFUSED in reasons:
            return 2
        if DISABLED in reasons:
            return 3
        return 0
