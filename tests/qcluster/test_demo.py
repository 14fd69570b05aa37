"""``./dev demo`` as a smoke test: migrate, start a node, health UP, clean stop."""

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.processes import REPO_ROOT, free_port


@pytest.mark.slow
def test_demo_starts_a_healthy_node_and_stops_it_cleanly():
    with tempfile.TemporaryDirectory() as tmp:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
        env.pop("REDIS_URL", None)
        env["DATABASE_URL"] = f"sqlite:///{Path(tmp) / 'demo.sqlite3'}"
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "example_project.demo",
                "--check",
                "--port",
                str(free_port()),
                "--spool-dir",
                str(Path(tmp) / "printed"),
            ],
            cwd=REPO_ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "Admin user: admin  password: " in result.stdout
    assert "Node demo-node is UP." in result.stdout
    assert "Printed job " in result.stdout  # the demo agent printed the demo job
    assert "node_stopped node=demo-node" in output
    assert "Node stopped." in result.stdout
    # The next steps, with the key and a device token made for them.
    key = re.search(r"Application key \(tenant demo\): (\S+)", result.stdout)[1]
    assert f'curl -s -H "Authorization: Bearer {key}" -F device=demo-printer' in result.stdout
    assert re.search(
        r"QPRINT_AGENT_TOKEN=\S{20,} \S*python\S* -m qprint.agent --url", result.stdout
    )
    assert "--name my-printer --printer mine=dir:var/demo/mine" in result.stdout


def test_demo_help_explains_its_options():
    result = subprocess.run(
        [sys.executable, "-m", "example_project.demo", "--help"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert "usage: ./dev demo" in result.stdout
    assert "the port of the demo node" in result.stdout and "--check" in result.stdout
