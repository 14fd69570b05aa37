"""The agent as one file (``./dev agent-pyz``, docs/AGENT.md): ``dist/qprint-agent.pyz`` built in
the test session, run by the system's ``python3`` from a fresh venv that has no package at all
(no Django): ``--help``; ``enroll`` against a real node, approved, then a job printed to a
``socket://`` printer; ``systemd-unit --install --dry-run``; and ``--install`` where systemd is
absent, refused with a clear message."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from qprint.domain import enrolment
from tests.processes import REPO_ROOT, ManagedProcess, wait_until
from tests.qprint.agent.raw import RecordingPrinter, print_raw
from tests.qprint.realtime.cluster import Node, node_env

sys.path.insert(0, str(REPO_ROOT / "tools"))
import agent_pyz

SYSTEM_PYTHON = shutil.which("python3") or "/usr/bin/python3"
CODE = re.compile(r"\b([BCDFGHJKLMNPQRSTVWXZ]{4}-[BCDFGHJKLMNPQRSTVWXZ]{4})\b")


@pytest.fixture(scope="module")
def pyz(tmp_path_factory) -> Path:
    return agent_pyz.build(tmp_path_factory.mktemp("dist") / "qprint-agent.pyz")


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory) -> str:
    """The system's python3 in a fresh venv without a single package (not even pip)."""
    venv = tmp_path_factory.mktemp("venv") / "bare"
    subprocess.run([SYSTEM_PYTHON, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    probe = subprocess.run([python, "-c", "import django"], capture_output=True, check=False)
    assert probe.returncode != 0, "the bare venv must not see Django"
    return python


def bare_env(**extra: str) -> dict[str, str]:
    """An environment that brings nothing of this checkout (no PYTHONPATH, no Django settings)."""
    keep = ("PATH", "HOME", "LANG", "TMPDIR")
    return {**{k: os.environ[k] for k in keep if k in os.environ}, **extra}


def run(python: str, pyz: Path, *args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(
        [python, str(pyz), *args],
        capture_output=True,
        text=True,
        env=bare_env(),
        timeout=60,
        check=False,
        **kwargs,
    )


def test_the_pyz_holds_the_agent_and_pure_python_only(pyz):
    import zipfile

    names = [n for n in zipfile.ZipFile(pyz).namelist() if not n.endswith("/")]
    assert "__main__.py" in names and "qprint/agent/__main__.py" in names
    assert not [n for n in names if n.startswith(("django/", "channels/", "daphne/"))]
    assert not [n for n in names if n.endswith((".so", ".pyd"))]
    assert [n for n in names if n.startswith("qprint/")] == [
        n for n in names if n.startswith(("qprint/__init__.py", "qprint/agent/", "qprint/core/"))
    ]


def test_help_runs_with_the_system_python_and_no_packages(pyz, bare_python):
    version = subprocess.run(
        [bare_python, "-c", "import sys; print(sys.version_info[:2] >= (3, 11))"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert version.stdout.strip() == "True"
    result = run(bare_python, pyz, "--help")
    assert result.returncode == 0, result.stderr
    assert "enroll URL" in result.stdout and "systemd-unit" in result.stdout
    enroll_help = run(bare_python, pyz, "enroll", "--help")
    assert enroll_help.returncode == 0 and "--config" in enroll_help.stdout


@pytest.fixture
def node(live_database_url):
    """A Daphne node of the example project (heartbeat 1 s, enrolment polls every second)."""
    env = node_env(live_database_url, None, "node-a", QPRINT_ENROLMENT_INTERVAL_SECONDS="1")
    started = Node("node-a", env).start()
    try:
        yield f"{started.http}/qprint/"
    finally:
        started.stop()


@pytest.mark.services
@pytest.mark.slow
def test_pyz_enrolls_and_prints_a_job_to_a_raw_printer(pyz, bare_python, node, tmp_path):
    printer = RecordingPrinter()
    config = tmp_path / "etc" / "agent.toml"
    config.parent.mkdir()
    config.write_text(
        "# the shop's printer, written by hand\n"
        f'state_dir = "{tmp_path / "state"}"\n'
        "backoff_max = 2\n\n"
        f'[[printers]]\nname = "labels"\nuri = "{printer.uri}"\ndefault = true\n'
    )
    agent = ManagedProcess(
        "pyz-agent",
        [bare_python, str(pyz), "enroll", node, "--config", str(config), "--discover-seconds", "1"],
        bare_env(PYTHONUNBUFFERED="1"),
    ).start()
    try:
        code = wait_until(
            lambda: (m := CODE.search(agent.log())) and m.group(1), 30, message="the code shown"
        )
        assert "/admin/qprint/enrolment/" in agent.log()
        approved = enrolment.approve(
            code, source="127.0.0.1", actor="test", tenant="acme", name="shop-1"
        )
        wait_until(
            lambda: "connected device=" in agent.log() or not agent.alive(),
            30,
            message="the agent connected",
        )
        assert agent.alive(), agent.log()[-3000:]

        token_file = tmp_path / "etc" / "device.token"
        assert token_file.stat().st_mode & 0o777 == 0o600
        written = config.read_text()
        assert written.startswith(f'url = "{node}"\ntoken_file = "{token_file}"\nname = "shop-1"\n')
        assert "# the shop's printer, written by hand" in written  # kept as it was
        assert written.count("[[printers]]") >= 1 and printer.uri in written
        assert token_file.read_text().strip() not in written

        print_raw(node, "acme", "shop-1", b"^XA^FO50,50^FDhello^FS^XZ", agent)
        assert printer.documents == [b"^XA^FO50,50^FDhello^FS^XZ"]
        assert str(approved.device) == "acme/shop-1"
    finally:
        agent.stop()
        printer.close()


def test_install_dry_run_prints_every_step_and_changes_nothing(pyz, bare_python, tmp_path):
    config = tmp_path / "agent.toml"
    token = tmp_path / "device.token"
    token.write_text("secret\n")
    token.chmod(0o600)
    config.write_text(f'url = "https://print.example.com/qprint/"\ntoken_file = "{token}"\n')
    credential = tmp_path / "credential.token"
    result = run(
        bare_python,
        pyz,
        "systemd-unit",
        "--install",
        "--dry-run",
        "--config",
        str(config),
        "--token-credential",
        str(credential),
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    home = "/usr/local/lib/qprint-agent/qprint-agent.pyz"
    assert f"copy {pyz} to {home}" in out
    assert f"copy the token file {token} to the credentials file {credential} (mode 0600)" in out
    assert f"ExecStart={bare_python} {home} --config {config} --token-file " in out
    assert "${CREDENTIALS_DIRECTORY}/device-token" in out
    assert f"LoadCredential=device-token:{credential}" in out
    assert "write /etc/systemd/system/qprint-agent.service" in out
    assert out.index("systemctl daemon-reload") < out.index(
        "systemctl enable --now qprint-agent.service"
    )
    assert not credential.exists()
    assert "secret" not in out


@pytest.mark.skipif(os.path.isdir("/run/systemd/system"), reason="systemd runs on this machine")
def test_install_without_systemd_says_so_and_writes_nothing(pyz, bare_python, tmp_path):
    config = tmp_path / "agent.toml"
    config.write_text('url = "https://print.example.com/qprint/"\n')
    result = run(bare_python, pyz, "systemd-unit", "--install", "--config", str(config))
    assert result.returncode == 69
    assert "cannot install the service: " in result.stderr
    assert "systemd" in result.stderr and "Traceback" not in result.stderr
    assert not Path("/etc/systemd/system/qprint-agent.service").exists()
