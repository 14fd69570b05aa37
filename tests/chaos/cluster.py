"""A whole deployment on loopback for the fault tests: nginx in front of Daphne nodes, one
``cluster_runtime`` per node, PostgreSQL (the test database), a Redis of the test's own, and the
reference agent running many simulated devices through the load balancer.

Each piece can be killed and brought back; every process is stopped by ``Cluster.stop``.
"""

import base64
import re
import shutil
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import httpx

from tests.processes import ManagedProcess, daphne_node, free_port, manage, port_open, python
from tests.waiting import wait_until

LIBFAKETIME = next(iter(Path("/usr/lib").glob("*/faketime/libfaketime.so.1")), None)


def unavailable_reason() -> str | None:
    if shutil.which("nginx") is None and not Path("/usr/sbin/nginx").exists():
        return "nginx is not installed (apt-get install nginx-light)"
    if shutil.which("redis-server") is None:
        return "redis-server is not installed"
    if LIBFAKETIME is None:
        return "libfaketime is not installed (apt-get install libfaketime)"
    return None


class Node:
    """One pod: a Daphne web process and its ``cluster_runtime``, with the same node id."""

    def __init__(self, node_id: str, env: dict[str, str]):
        self.node_id = node_id
        self.port = free_port()
        self.env = {**env, "QQQ_NODE_ID": node_id}
        self.web = daphne_node(f"{node_id}-web", self.port, self.env)
        self.runtime = ManagedProcess(f"{node_id}-runtime", manage("cluster_runtime"), self.env)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/qprint/"

    def start(self) -> "Node":
        """Start whichever of the two processes is not running (after a drain: the runtime)."""
        if not self.web.alive():
            self.web.start()
        if not self.runtime.alive():
            self.runtime.start()
        wait_until(lambda: port_open(self.port), 30, message=f"{self.node_id} listening")
        return self

    def kill(self) -> None:
        """SIGKILL both processes: the pod dies without a word."""
        self.web.kill()
        self.runtime.kill()

    def stop(self) -> None:
        self.web.stop()
        self.runtime.stop()


class LoadBalancer:
    """nginx on loopback, round robin over the nodes, WebSocket upgrades passed through.

    A refused or failed upgrade (5xx: a draining node, a dead one) and a refused connection go to
    the next node; a request already sent is never replayed (nginx's default for POST).
    """

    def __init__(self, nodes: list[Node]):
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="qprint-nginx-"))
        self.dir.chmod(0o777)
        self.proc: ManagedProcess | None = None
        servers = "\n".join(
            f"        server 127.0.0.1:{n.port} max_fails=1 fail_timeout=1s;" for n in nodes
        )
        d = self.dir
        (d / "nginx.conf").write_text(
            f"""worker_processes 1;
daemon off;
pid {d}/nginx.pid;
error_log {d}/error.log warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    client_body_temp_path {d}/body;
    proxy_temp_path {d}/proxy;
    fastcgi_temp_path {d}/fastcgi;
    uwsgi_temp_path {d}/uwsgi;
    scgi_temp_path {d}/scgi;
    client_max_body_size 64m;
    map $http_upgrade $connection_upgrade {{ default upgrade; '' close; }}
    upstream qprint {{
{servers}
    }}
    server {{
        listen 127.0.0.1:{self.port};
        location / {{
            proxy_pass http://qprint;
            proxy_http_version 1.1;
            proxy_set_header Upgrade $http_upgrade;
            proxy_set_header Connection $connection_upgrade;
            proxy_set_header Host $http_host;
            proxy_connect_timeout 2s;
            proxy_read_timeout 3600s;
            proxy_next_upstream error timeout http_500 http_502 http_503;
            proxy_next_upstream_tries 3;
        }}
    }}
}}
"""
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/qprint/"

    def start(self) -> "LoadBalancer":
        nginx = shutil.which("nginx") or "/usr/sbin/nginx"
        self.proc = ManagedProcess(
            "nginx", [nginx, "-p", str(self.dir), "-c", str(self.dir / "nginx.conf")], {}
        ).start()
        wait_until(lambda: port_open(self.port), 15, message="nginx listening")
        return self

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


def skewed_clock_env(offset: str) -> dict[str, str]:
    """Environment that moves the wall clock of a process by ``offset`` (e.g. ``+5m``).

    The monotonic clock moves by the same constant offset, which changes no interval; only the
    node's idea of "now" is wrong, which is what the database-clock rule (docs/CLUSTER.md) is about.
    (``FAKETIME_DONT_FAKE_MONOTONIC=1`` would be closer, but then Python's ``time.sleep`` fails
    with EINVAL under libfaketime 0.9.10.)
    """
    assert LIBFAKETIME is not None
    return {"LD_PRELOAD": str(LIBFAKETIME), "FAKETIME": offset, "FAKETIME_DONT_RESET": "1"}


class Submitter:
    """Submits jobs through the application API, to the nodes directly in turn.

    A failed attempt is retried on the next node with the same ``Idempotency-Key``, so a job
    whose first attempt committed before its node died is not submitted twice.
    """

    def __init__(self, nodes: list[Node], key: str):
        self.nodes = nodes
        self.key = key
        self.turn = 0
        self.client = httpx.Client(timeout=10, headers={"Authorization": f"Bearer {key}"})
        self.retries = 0
        self.stopped = False
        self.last_refusal = ""

    def submit(self, device: str, document: bytes, title: str) -> str:
        body = {
            "device": device,
            "title": title,
            "content_type": "application/pdf",
            "content_base64": base64.b64encode(document).decode(),
        }
        headers = {"Idempotency-Key": str(uuid.uuid4())}

        def attempt() -> str | None:
            node = self.nodes[self.turn % len(self.nodes)]
            self.turn += 1
            try:
                response = self.client.post(node.url + "api/v1/jobs", json=body, headers=headers)
            except httpx.HTTPError as exc:
                self.retries += 1
                self.last_refusal = repr(exc)
                return None
            if response.status_code in (200, 201):
                return response.json()["id"]
            self.retries += 1
            self.last_refusal = f"{response.status_code} {response.text[:200]}"
            return None

        deadline = time.monotonic() + 60
        while not self.stopped:
            job_id = attempt()
            if job_id:
                return job_id
            if time.monotonic() > deadline:
                raise AssertionError(f"no node accepted the job for 60 s: {self.last_refusal}")
            time.sleep(0.2)  # the next node in turn, shortly
        raise RuntimeError("submitter stopped")

    def close(self) -> None:
        self.client.close()


def admin_drain(base: str, username: str, password: str, node_id: str) -> None:
    """Ask for a drain the way an operator does: the admin's *Drain node* action."""
    root = base.split("/qprint/")[0]
    with httpx.Client(base_url=root, timeout=10, follow_redirects=False) as client:
        client.get("/admin/login/")
        token = client.cookies["csrftoken"]
        response = client.post(
            "/admin/login/?next=/admin/",
            data={
                "username": username,
                "password": password,
                "csrfmiddlewaretoken": token,
                "next": "/admin/",
            },
        )
        assert response.status_code == 302, response.text[:500]
        page = client.get("/admin/qcluster/clusternode/")
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
        response = client.post(
            "/admin/qcluster/clusternode/",
            data={
                "action": "drain_nodes",
                "_selected_action": node_id,
                "csrfmiddlewaretoken": token,
                "index": "0",
                "confirmed": "yes",  # the drain confirmation page's own post
            },
        )
        assert response.status_code == 302, response.text[:500]


def fleet_args(
    url: str,
    tokens_file: Path,
    state_dir: Path,
    spool_dir: Path,
    count: int,
    raw_printer: str | None = None,
):
    """The agent process of the devices: the directory spooler writing to ``spool_dir``, or
    with ``raw_printer`` (``host:port``) every device's one printer a raw ``socket://`` one."""
    printer = (
        ["--printer", f"raw=socket://{raw_printer}"]
        if raw_printer
        else ["--spooler", "directory", "--spool-dir", str(spool_dir)]
    )
    return python(
        "-m", "qprint.agent", "--url", url, "--tokens-file", str(tokens_file),
        "--devices", str(count), "--state-dir", str(state_dir), *printer,
        "--backoff-initial", "0.2", "--backoff-max", "2", "--no-report-printers",
    )  # fmt: skip


def run_quietly(args: list[str]) -> None:
    subprocess.run(args, check=True, capture_output=True, timeout=60)
