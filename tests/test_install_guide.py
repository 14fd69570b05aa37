"""docs/INSTALL.md, followed literally: a fresh ``django-admin startproject``, the guide's blocks
applied in order, then migrate, Daphne, ``cluster_runtime``, the reference agent, a job printed.

Each fenced block of the guide carries a comment saying what to do with it:

- ``<!-- guide: install -->``: the ``pip install`` line; its extras must exist in pyproject.toml
  (the test runs in the environment that installed this checkout).
- ``<!-- guide: append PATH -->`` / ``<!-- guide: file PATH -->``: appended to / written as the
  file PATH of the project (the directory of ``manage.py``).
- ``<!-- guide: run -->``: a bash script run in the project; it must succeed.
- ``<!-- guide: processes -->``: one long-running command per line (``export`` lines set the
  environment of what follows), started and kept until the end.
- ``<!-- guide: skip (why) -->``: not run (interactive, or an alternative to another block).

A block without a comment fails the test, so nothing in the guide goes unchecked. The one change
made to what the guide says: port 8000 becomes a free port.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import tomllib
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.processes import REPO_ROOT, ManagedProcess, free_port, port_open, wait_until

GUIDE = REPO_ROOT / "docs" / "INSTALL.md"
BLOCK = re.compile(
    r"(?:<!-- guide: (?P<kind>\w+)(?: (?P<arg>[^>]*?))? -->\n)?```(?P<lang>\w*)\n(?P<body>.*?)^```",
    re.S | re.M,
)
KINDS = {"install", "append", "file", "run", "processes", "skip"}


@dataclass(frozen=True)
class Block:
    kind: str
    arg: str
    body: str


def guide_blocks() -> list[Block]:
    blocks = []
    for match in BLOCK.finditer(GUIDE.read_text()):
        kind = match["kind"]
        assert kind, f"a block of docs/INSTALL.md has no <!-- guide: ... --> comment:\n{match[0]}"
        assert kind in KINDS, f"unknown guide block kind {kind!r}"
        blocks.append(Block(kind, (match["arg"] or "").strip(), match["body"]))
    return blocks


def test_every_block_of_the_guide_says_what_it_is_and_its_extras_exist():
    blocks = guide_blocks()
    kinds = [b.kind for b in blocks]
    assert {"install", "append", "file", "run", "processes"} <= set(kinds)
    assert all(b.arg for b in blocks if b.kind in ("append", "file", "skip"))
    extras = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    for block in (b for b in blocks if b.kind == "install"):
        for named in re.findall(r"django-qprint\[([\w,-]+)\]", block.body):
            for extra in named.split(","):
                assert extra in extras, f"the guide installs django-qprint[{extra}]: no such extra"
    text = GUIDE.read_text()
    for extra in extras:  # the table says what each user-facing extra gives
        if extra not in ("test", "bench"):
            assert f"| `{extra}` |" in text, f"docs/INSTALL.md does not explain the extra {extra}"


def test_the_readme_shows_the_way_in_on_its_first_screen():
    first_screen = (REPO_ROOT / "README.md").read_text().splitlines()[:25]
    assert any("docs/INSTALL.md" in line for line in first_screen)


@pytest.fixture
def guide_database(services):
    """A database of the guide's own on the suite's PostgreSQL server, dropped after."""
    import psycopg

    name = f"qprint_guide_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    with psycopg.connect(services.database_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    yield name
    with psycopg.connect(services.database_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def project_env(services, database: str) -> dict[str, str]:
    """The guide's reader's shell: this environment's python first on PATH, the guide's
    DB_*/REDIS_URL pointing at the suite's services, nothing of the test suite's settings."""
    from urllib.parse import urlsplit

    url = urlsplit(services.database_url)
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PYTEST_", "DJANGO_", "QPRINT_", "QQQ_", "DB_"))
        and k not in ("PYTHONPATH", "DATABASE_URL", "REDIS_URL")
    }
    env.update(
        {
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
            "DB_NAME": database,
            "DB_USER": url.username or "",
            "DB_PASSWORD": url.password or "",
            "DB_HOST": url.hostname or "127.0.0.1",
            "DB_PORT": str(url.port or 5432),
            "REDIS_URL": services.redis_url,
            "PYTHONUNBUFFERED": "1",
        }
    )
    return env


def run_script(script: str, cwd: Path, env: dict[str, str]) -> str:
    result = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, (
        f"the guide's commands failed ({result.returncode}):\n{script}\n"
        f"--- stdout\n{result.stdout}\n--- stderr\n{result.stderr}"
    )
    return result.stdout


def job_rows(env: dict[str, str]) -> list[tuple[str, str]]:
    import psycopg

    conninfo = {
        "dbname": env["DB_NAME"],
        "user": env["DB_USER"],
        "password": env["DB_PASSWORD"],
        "host": env["DB_HOST"],
        "port": env["DB_PORT"],
    }
    with psycopg.connect(**{k: v for k, v in conninfo.items() if v}) as conn:
        return conn.execute("SELECT id::text, status FROM qprint_job").fetchall()


@pytest.mark.services
@pytest.mark.slow
def test_the_install_guide_followed_literally_prints_a_job(tmp_path, services, guide_database):
    port = str(free_port())
    env = project_env(services, guide_database)
    run_script("django-admin startproject mysite", tmp_path, env)
    project = tmp_path / "mysite"
    processes: list[ManagedProcess] = []
    outputs: list[str] = []
    try:
        for block in guide_blocks():
            body = block.body.replace("8000", port)
            if block.kind in ("append", "file"):
                target = project / block.arg
                assert target.parent.is_dir(), f"the guide writes {block.arg}: no such directory"
                if block.kind == "append":
                    assert target.exists(), f"the guide appends to {block.arg}, which is missing"
                    with target.open("a") as f:
                        f.write("\n\n" + body)
                else:
                    target.write_text(body)
            elif block.kind == "run":
                outputs.append(run_script(body, project, env))
            elif block.kind == "processes":
                for line in filter(None, (raw.strip() for raw in body.splitlines())):
                    if line.startswith("export "):
                        name, _, value = line.removeprefix("export ").partition("=")
                        env[name] = value
                        continue
                    args = shlex.split(line)
                    process = ManagedProcess(args[0], args, dict(env), cwd=project).start()
                    processes.append(process)
                    if args[0] == "qprint-daphne":
                        wait_until(
                            lambda p=process: port_open(int(port)) or not p.alive(),
                            60,
                            message="daphne listening",
                        )
                        assert process.alive(), process.log()
        # The guide's job, printed by the guide's agent into the guide's directory.
        wait_until(
            lambda: [status for _, status in job_rows(env)] == ["PRINTED"],
            60,
            message="the guide's job PRINTED",
        )
        (job_id,) = [job for job, _ in job_rows(env)]
        printed = project / "printed" / f"{job_id}.txt"
        assert printed.read_text() == "Hello from qprint\n"
        # What the reader sees on the way: check passes clean, the device is connected, the
        # web process logs through the guide's LOGGING, the node is UP.
        assert "System check identified no issues" in outputs[0], outputs[0]
        assert json.loads(outputs[-1])["online"] is True, outputs[-1]
        web = next(p for p in processes if p.name == "qprint-daphne")
        assert "INFO qprint.socket socket_open device=shop-1/front-desk" in web.log(), web.log()
        assert all(p.alive() for p in processes), [(p.name, p.log()) for p in processes]
    finally:
        for process in reversed(processes):  # the agent, the runtime (drains), then Daphne
            process.stop(30)
