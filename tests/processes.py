"""Real processes for tests: Daphne nodes, ``cluster_runtime``, agents, a Redis of the test's own.

Every wait here is for a condition with a deadline, never a bare sleep.
"""

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from tests.waiting import wait_until

T = TypeVar("T")
REPO_ROOT = Path(__file__).resolve().parent.parent


def wait_for_other_sessions_to_end(django_db_blocker=None) -> None:
    """Processes a test stopped (nodes, runtimes) end their database sessions a moment later; the
    test database can only be flushed or dropped once they are gone. ``django_db_blocker``: for a
    caller outside a test's database access (a module-scoped fixture's teardown)."""
    import contextlib

    from django.db import connection

    def alone() -> bool:
        unblocked = django_db_blocker.unblock() if django_db_blocker else contextlib.nullcontext()
        with unblocked, connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
            return cursor.fetchone()[0] == 0

    wait_until(alone, 15, message="the other database sessions ended")


def database_url_of(settings_dict: dict[str, Any]) -> str:
    """A URL to the database of a Django ``settings_dict``, for subprocesses (``DATABASE_URL``)."""
    d = settings_dict
    if d["ENGINE"] == "django.db.backends.sqlite3":
        return f"sqlite:///{d['NAME']}"
    user = d.get("USER") or ""
    password = f":{d['PASSWORD']}" if d.get("PASSWORD") else ""
    auth = f"{user}{password}@" if user else ""
    host = d.get("HOST") or "127.0.0.1"
    port = f":{d['PORT']}" if d.get("PORT") else ""
    return f"postgres://{auth}{host}{port}/{d['NAME']}"


#: Ports :func:`free_port` gave out in this process: none is given twice.
_GIVEN_PORTS: set[int] = set()


def run_example_project(*argv: str, **env_vars: str) -> subprocess.CompletedProcess:
    """``python *argv`` in a process of the example project (its settings, a SQLite database
    unless ``env_vars`` says otherwise), from the repository's root; its completed process."""
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "example_project.settings",
        "DATABASE_URL": "sqlite:////tmp/qprint-check.sqlite3",
        **env_vars,
    }
    return subprocess.run(
        [sys.executable, *argv], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=60
    )


def free_port() -> int:
    """A loopback port nothing listens on, never one given out before in this process: the kernel
    may hand the same free port to two calls made before either is bound (two nodes built, then
    started), and the second server would then seem to listen on the first one's socket."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _GIVEN_PORTS:
            _GIVEN_PORTS.add(port)
            return port


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex((host, port)) == 0


class ManagedProcess:
    """A subprocess whose output goes to a log file, stopped (and killed if need be) on ``stop``."""

    def __init__(self, name: str, args: list[str], env: dict[str, str], cwd: Path = REPO_ROOT):
        self.name = name
        self.args = args
        self.env = env
        self.cwd = cwd
        self.log_path = Path(tempfile.mkstemp(prefix=f"qprint-{name}-", suffix=".log")[1])
        self.proc: subprocess.Popen | None = None

    def start(self) -> "ManagedProcess":
        log = open(self.log_path, "ab")  # noqa: SIM115 - closed with the process
        self.proc = subprocess.Popen(
            self.args,
            env=self.env,
            cwd=self.cwd,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def send(self, sig: int) -> None:
        if self.alive():
            os.kill(self.pid, sig)

    def kill(self) -> None:
        """SIGKILL, as a node that dies without a word."""
        if self.alive():
            os.kill(self.pid, signal.SIGKILL)
            self.proc.wait(10)

    def wait(self, timeout: float) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout)

    def stop(self, timeout: float = 10) -> int | None:
        if self.proc is None:
            return None
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return self.proc.returncode

    def __repr__(self) -> str:
        return f"<ManagedProcess {self.name} pid={self.proc and self.proc.pid}>"


def python(*args: str) -> list[str]:
    return [sys.executable, *args]


def manage(*args: str) -> list[str]:
    return python(str(REPO_ROOT / "manage.py"), *args)


@contextmanager
def listening_node(name: str, env: dict[str, str]) -> Iterator[tuple[str, ManagedProcess]]:
    """A Daphne node on a spare port, once it listens: ``(base URL, process)``; stopped after."""
    port = free_port()
    process = daphne_node(name, port, env).start()
    try:
        wait_until(lambda: port_open(port) or not process.alive(), 30, message="node listening")
        assert process.alive(), process.log()
        yield f"http://127.0.0.1:{port}", process
    finally:
        process.stop()


def daphne_node(
    name: str, port: int, env: dict[str, str], application: str = "example_project.asgi:application"
) -> ManagedProcess:
    """A Daphne node of the example project on ``port``, started as the docs start one
    (``qprint-daphne``: Daphne on uvloop's loop; then wait for ``port_open``); ``application``
    another ASGI application of it (a benchmark's variant)."""
    args = python("-m", "qprint.daphne", "-b", "127.0.0.1", "-p", str(port), application)
    return ManagedProcess(name, args, env)


class RedisServer:
    """A redis-server of the test's own on a spare port, so a test may stop and restart it."""

    def __init__(self, port: int | None = None):
        self.port = port or free_port()
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 10) -> "RedisServer":
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed")
        self.proc = subprocess.Popen(
            [
                binary,
                "--bind",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--save",
                "",
                "--appendonly",
                "no",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        wait_until(lambda: port_open(self.port), timeout, message=f"redis on {self.port}")
        return self

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        wait_until(lambda: not port_open(self.port), 10, message=f"redis on {self.port} down")
