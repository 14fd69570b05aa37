"""``./dev demo`` as a smoke test: migrate, start a node, health UP, clean stop."""

import os
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
