"""The throttle of failed authentications on a node run as docs/deploy/ runs it: Daphne with the
web container's own command and the ConfigMap's settings, behind a proxy on loopback (the test's
client, which appends the address it saw to ``X-Forwarded-For`` as an ingress does).

A guesser writes whatever it likes on the left of ``X-Forwarded-For``; a fresh address there per
guess must not escape the limit, and the device behind the guesser's address (a shop's NAT) must
still get in, over HTTP and over the socket upgrade (never refused with a 500 there).
"""

from __future__ import annotations

import httpx
import pytest
import yaml
from channels.db import database_sync_to_async

from qprint import api
from tests.processes import REPO_ROOT, ManagedProcess, free_port, port_open, python
from tests.qprint.realtime.cluster import nodes_done_with_sockets, upgrade_status
from tests.waiting import wait_until

pytestmark = [pytest.mark.services, pytest.mark.slow]

K8S = REPO_ROOT / "docs" / "deploy" / "kubernetes"
LIMIT = 4
#: The address the proxy saw: the shop's NAT, where the guesser and the shop's device both are.
SHOP = "203.0.113.7"


def web_command(port: int) -> list[str]:
    """The web container's command from deployment.yaml, on loopback and ``port``."""
    deployment = yaml.safe_load((K8S / "deployment.yaml").read_text())
    containers = deployment["spec"]["template"]["spec"]["containers"]
    command = list(next(c for c in containers if c["name"] == "web")["command"])
    assert command[0] == "qprint-daphne"
    for flag, value in (("--bind", "127.0.0.1"), ("--port", str(port))):
        command[command.index(flag) + 1] = value
    return python("-m", "qprint.daphne", *command[1:])  # the console script's module


@pytest.fixture
def deployed_node(subprocess_env):
    config = yaml.safe_load((K8S / "configmap.yaml").read_text())["data"]
    env = {
        **subprocess_env,
        **{k: v for k, v in config.items() if k.startswith("QPRINT_")},
        "QPRINT_TRUSTED_PROXIES": "127.0.0.1",  # the proxy of this test: its client, on loopback
        "QPRINT_AUTH_FAILURE_LIMIT": str(LIMIT),
        "QQQ_NODE_ID": "deployed",
    }
    port = free_port()
    node = ManagedProcess("deployed", web_command(port), env).start()
    try:
        wait_until(lambda: port_open(port) or not node.alive(), 30, message="node listening")
        assert node.alive(), node.log()
        yield f"127.0.0.1:{port}", node
    finally:
        node.stop()


def through_proxy(token: str, client_wrote: str) -> dict[str, str]:
    """Headers of a request the proxy forwarded: what the client wrote, then the address seen."""
    return {"Authorization": f"Bearer {token}", "X-Forwarded-For": f"{client_wrote}, {SHOP}"}


def socket_of(host: str) -> str:
    return f"ws://{host}/qprint/ws/device/"


async def test_a_fresh_forwarded_address_per_guess_is_throttled_and_the_shop_still_gets_in(
    deployed_node, transactional_db
):
    host, node = deployed_node
    _, token = await database_sync_to_async(api.create_device)("acme", "shop-till")
    _, key = await database_sync_to_async(api.create_application_key)("acme", "shop-app")
    async with httpx.AsyncClient(base_url=f"http://{host}/qprint/", timeout=20) as client:
        answers = []
        for n in range(3 * LIMIT):
            guess = await client.get(
                "api/v1/jobs", headers=through_proxy(f"guess-{n}-xxxxxxxx", f"198.51.100.{n}")
            )
            answers.append(guess.status_code)
        assert answers == [401] * LIMIT + [429] * (2 * LIMIT), answers
        # The shop's own credentials, from the same address, are not refused for the guesses.
        mine = await client.get("api/v1/jobs", headers=through_proxy(key, "10.1.2.3"))
        assert mine.status_code == 200, mine.text
        claim = await client.post("api/v1/device/claim", headers=through_proxy(token, "x"))
        assert claim.status_code == 409, claim.text  # not connected: authenticated, then gated
    # The socket upgrade: a throttled guess is refused as a wrong token (403 under Daphne), never
    # 500 (an agent would retry it); the shop's device connects.
    guess = through_proxy("guess-socket-xxxxxxxx", "198.51.100.200")
    assert await upgrade_status(socket_of(host), None, headers=guess) == 403
    assert "socket_refused status=429" in node.log()
    mine = through_proxy(token, "198.51.100.201")
    assert await upgrade_status(socket_of(host), None, headers=mine) == 101
    await nodes_done_with_sockets()
