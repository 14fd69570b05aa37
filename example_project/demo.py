"""A demo node on the embedded default: ``./dev demo`` (or ``python -m example_project.demo``).

SQLite next to ``manage.py`` and the in-memory channel layer, unless ``DATABASE_URL``/``REDIS_URL``
say otherwise. It migrates, creates (or resets) the user ``admin`` and prints its password, starts
one node: a Daphne web process and its ``cluster_runtime`` (same node id), prints the admin URL and
runs until Ctrl-C, then stops both cleanly (the runtime drains, then Daphne stops).

Beside the node it runs the reference print agent (``python -m qprint.agent``) for the device
``demo/demo-printer`` with the directory spooler, submits one job through the application API and
prints where the printed file is (``--spool-dir``, default ``var/demo/printed``).

``--check`` starts everything, waits until ``/qcluster/health/`` answers UP and the demo job is
PRINTED, stops and exits 0 (a smoke test); ``--port`` picks the port (default 8000).
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import secrets
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
NODE_ID = "demo-node"
ADMIN_USER = "admin"


def node_environment() -> dict[str, str]:
    """The environment of the demo's processes: one node id for both, DEBUG for static files."""
    env = dict(os.environ)
    env.setdefault("DJANGO_SETTINGS_MODULE", "example_project.settings")
    env.setdefault("DEBUG", "1")
    env.setdefault("QQQ_NODE_ID", NODE_ID)
    env.setdefault("QQQ_NODE_ROLES", "web,worker")
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    return env


def prepare(env: dict[str, str]) -> str:
    """Migrate and create or reset the admin user; returns its new password."""
    os.environ.update({k: env[k] for k in ("DJANGO_SETTINGS_MODULE", "DEBUG", "QQQ_NODE_ID")})
    sys.path.insert(0, str(REPO_ROOT))
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command

    call_command("migrate", interactive=False, verbosity=0)
    password = secrets.token_urlsafe(12)
    user, _ = get_user_model().objects.get_or_create(
        username=ADMIN_USER, defaults={"email": "admin@example.com"}
    )
    user.is_staff = user.is_superuser = True
    user.set_password(password)
    user.save()
    from django.db import connections

    connections.close_all()
    return password


DEMO_TENANT = "demo"
DEMO_DEVICE = "demo-printer"


YOUR_DEVICE = "my-printer"


def _device_token(name: str, description: str) -> str:
    """A device of the demo tenant, made or its token rotated: its new token."""
    from qprint import api
    from qprint.models import Device

    device = Device.objects.filter(tenant=DEMO_TENANT, name=name).first()
    if device is None:
        return api.create_device(DEMO_TENANT, name, description=description)[1]
    return api.rotate_device_token(device)


def prepare_printing() -> tuple[str, str, str]:
    """The demo device's token, a device for an agent of your own and a new application key:
    ``(token, your_token, key)``."""
    from django.db import connections

    from qprint import api

    token = _device_token(DEMO_DEVICE, "the demo's agent")
    your_token = _device_token(YOUR_DEVICE, "an agent you run yourself")
    _, key = api.create_application_key(DEMO_TENANT, f"demo-{secrets.token_hex(4)}")
    connections.close_all()
    return token, your_token, key


def next_steps(port: int, key: str, your_token: str) -> str:
    """What to try next, with the key and the token just made (printed once the demo job is)."""
    base = f"http://127.0.0.1:{port}/qprint/"
    python = Path(sys.executable)
    if python.is_relative_to(REPO_ROOT):  # the .venv that ./dev made: commands need it
        python = python.relative_to(REPO_ROOT)
    return f"""
Next steps (from {REPO_ROOT}):
  Submit a job through the HTTP API (the demo's agent prints it into the spool directory):
    curl -s -H "Authorization: Bearer {key}" -F device={DEMO_DEVICE} \\
        -F "document=@README.md;type=text/plain" {base}api/v1/jobs
  Run an agent of your own for the device {DEMO_TENANT}/{YOUR_DEVICE} (its token, shown once):
    QPRINT_AGENT_TOKEN={your_token} {python} -m qprint.agent --url {base} \\
        --name {YOUR_DEVICE} --printer mine=dir:var/demo/mine
  then submit with -F device={YOUR_DEVICE}; a real printer: --printer office=cups:Office
  (docs/AGENT.md). Your own project: docs/INSTALL.md.
"""


def start_agent(env: dict[str, str], port: int, token: str, spool_dir: Path) -> subprocess.Popen:
    """The reference agent for the demo device, printing with the directory spooler."""
    args = [
        sys.executable,
        "-m",
        "qprint.agent",
        "--url",
        f"http://127.0.0.1:{port}/qprint/",
        "--name",
        DEMO_DEVICE,
        "--spooler",
        "directory",
        "--spool-dir",
        str(spool_dir),
        "--state-dir",
        str(spool_dir.parent / "agent-state"),
    ]
    return subprocess.Popen(args, env={**env, "QPRINT_AGENT_TOKEN": token}, cwd=REPO_ROOT)


def print_demo_job(port: int, key: str, timeout: float) -> dict | None:
    """Submit a one-page PDF through the application API; the job once final (None: not in time)."""
    base = f"http://127.0.0.1:{port}/qprint/api/v1/jobs"
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    text = b"BT /F1 24 Tf 72 720 Td (Hello from qprint) Tj ET"
    document = (
        b"%PDF-1.4\n1 0 obj<</Type/Catalog/Pages 2 0 R>>endobj\n"
        b"2 0 obj<</Type/Pages/Kids[3 0 R]/Count 1>>endobj\n"
        b"3 0 obj<</Type/Page/Parent 2 0 R/MediaBox[0 0 612 792]/Contents 4 0 R>>endobj\n"
        + f"4 0 obj<</Length {len(text)}>>stream\n".encode()
        + text
        + b"\nendstream endobj\ntrailer<</Root 1 0 R>>\n%%EOF\n"
    )
    body = json.dumps(
        {
            "device": DEMO_DEVICE,
            "title": "demo page",
            "content_type": "application/pdf",
            "content_base64": base64.b64encode(document).decode(),
        }
    ).encode()
    request = urllib.request.Request(base, data=body, headers=headers, method="POST")
    with urllib.request.urlopen(request, timeout=10) as response:
        job = json.load(response)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        poll = urllib.request.Request(f"{base}/{job['id']}", headers=headers)
        with urllib.request.urlopen(poll, timeout=10) as response:
            job = json.load(response)
        if job["status"] in ("PRINTED", "FAILED", "OUTCOME_UNKNOWN", "CANCELLED", "EXPIRED"):
            return job
        time.sleep(0.25)
    return None


def start_node(env: dict[str, str], port: int) -> dict[str, subprocess.Popen]:
    """Start the node's two processes: the web process (Daphne) and its cluster runtime."""
    python = sys.executable
    web = [python, "-m", "qprint.daphne", "-b", "127.0.0.1", "-p", str(port)]
    return {
        "runtime": subprocess.Popen(
            [python, str(REPO_ROOT / "manage.py"), "cluster_runtime"], env=env, cwd=REPO_ROOT
        ),
        "web": subprocess.Popen([*web, "example_project.asgi:application"], env=env, cwd=REPO_ROOT),
    }


def stop_node(processes: dict[str, subprocess.Popen], timeout: float = 40) -> None:
    """The agent, then the runtime (it drains, then STOPPED), then the web process."""
    for name in ("agent", "runtime", "web"):
        process = processes.get(name)
        if process is None or process.poll() is not None:
            continue
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


def health(port: int) -> dict | None:
    url = f"http://127.0.0.1:{port}/qcluster/health/"
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return json.load(response)
    except urllib.error.HTTPError as exc:
        return json.load(exc)
    except (OSError, ValueError):
        return None


def wait_healthy(port: int, processes: dict[str, subprocess.Popen], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(p.poll() is not None for p in processes.values()):
            return False
        report = health(port)
        if report and report.get("status") == "UP":
            return True
        time.sleep(0.25)
    return False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="./dev demo", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--port",
        type=int,
        default=8000,
        help="the port of the demo node (HTTP, admin and the device socket) on 127.0.0.1; the "
        "demo's agent and the printed next steps use it (default 8000)",
    )
    parser.add_argument(
        "--check",
        "--no-wait",
        action="store_true",
        help="wait for health UP, stop and exit 0 (smoke test)",
    )
    parser.add_argument("--timeout", type=float, default=60, help="seconds to wait for health UP")
    parser.add_argument(
        "--spool-dir",
        type=Path,
        default=REPO_ROOT / "var" / "demo" / "printed",
        help="where the demo agent writes printed documents (default var/demo/printed)",
    )
    args = parser.parse_args(argv)

    env = node_environment()
    password = prepare(env)
    print(f"Admin user: {ADMIN_USER}  password: {password}", flush=True)
    token, your_token, key = prepare_printing()

    stop = {"requested": False}

    def on_signal(signum, frame):
        stop["requested"] = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    processes = start_node(env, args.port)
    try:
        healthy = wait_healthy(args.port, processes, args.timeout)
        if not healthy:
            print(f"The node did not become healthy within {args.timeout:.0f}s.", file=sys.stderr)
            return 1
        base = f"http://127.0.0.1:{args.port}"
        print(f"Node {env['QQQ_NODE_ID']} is UP.", flush=True)
        print(f"Admin:   {base}/admin/   (user {ADMIN_USER})", flush=True)
        print(f"Health:  {base}/qcluster/health/   Metrics: {base}/metrics", flush=True)
        processes["agent"] = start_agent(env, args.port, token, args.spool_dir)
        job = print_demo_job(args.port, key, args.timeout)
        if job is None or job["status"] != "PRINTED":
            print(f"The demo job did not print: {job}", file=sys.stderr)
            return 1
        printed = args.spool_dir / f"{job['id']}.pdf"
        print(f"Printed job {job['id']} -> {printed}", flush=True)
        print(f"Application key (tenant {DEMO_TENANT}): {key}", flush=True)
        print(next_steps(args.port, key, your_token), flush=True)
        if args.check:
            return 0
        print("Ctrl-C stops the node.", flush=True)
        while not stop["requested"]:
            if any(p.poll() is not None for p in processes.values()):
                print("A process of the node exited; stopping.", file=sys.stderr)
                return 1
            time.sleep(0.2)
        return 0
    finally:
        stop_node(processes)
        print("Node stopped.", flush=True)


if __name__ == "__main__":
    sys.exit(main())
