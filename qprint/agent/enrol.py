"""``python -m qprint.agent enroll URL``: become a device without copying a token by hand.

After RFC 8628 (the device authorization grant; docs/AGENT.md, "Enrolling by code"): the agent
asks the server for an enrolment, prints the short code and the page where an operator types it,
and polls until the code is approved, refused or expired. Then it writes the token to a file
beside its config (mode 0600, never on the command line or in the config itself), writes or
completes ``agent.toml`` (``url``, ``token_file`` and the printers it found; an existing config
keeps its other settings, printers and comments) and starts.

Printers found: the CUPS queues ``lpstat`` lists (``cups:QUEUE``, the CUPS default marked
default) and the IPP printers DNS-SD announces (``ippfind``) that answer Get-Printer-Attributes;
a printer that does not answer is not written (nothing it cannot see).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urljoin, urlsplit

import httpx

from qprint.agent import __version__, ipp
from qprint.agent.config import ArgumentParser, read_toml
from qprint.agent.printers import PrinterSpec
from qprint.agent.spoolers import CupsSpooler
from qprint.core.text import digits

#: Exit statuses of ``enroll`` (besides the agent's own once it starts).
REFUSED = 1  # denied by an operator, or the code expired
UNAVAILABLE = 69  # the server could not be reached for the whole enrolment
USAGE = 64

TOKEN_FILE_NAME = "device.token"
#: RFC 8628 3.5: each ``slow_down`` adds five seconds to the interval.
SLOW_DOWN_SECONDS = 5


def default_config_path() -> str:
    """``$QPRINT_AGENT_CONFIG``, else ``/etc/qprint/agent.toml`` as root, else ``./agent.toml``."""
    configured = os.environ.get("QPRINT_AGENT_CONFIG")
    if configured:
        return configured
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        return "/etc/qprint/agent.toml"
    return "agent.toml"


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(
        prog="python -m qprint.agent enroll",
        description="Enrol this agent as a device by a short code that an operator approves in "
        "the admin ('Enrol a device') or with 'manage.py qprint_device approve CODE'. Then the "
        "token is written beside the config (mode 0600), the config is written or completed "
        "with the printers found here, and the agent starts.",
    )
    parser.add_argument(
        "url", help="where qprint is mounted, e.g. https://print.example.com/qprint/"
    )
    parser.add_argument(
        "--config",
        default=None,
        metavar="FILE",
        help="the agent.toml to write or complete (default $QPRINT_AGENT_CONFIG, else "
        "/etc/qprint/agent.toml as root, else ./agent.toml)",
    )
    parser.add_argument(
        "--no-start",
        dest="start",
        action="store_false",
        help="enrol and write the files, then exit (e.g. before 'systemd-unit --install')",
    )
    parser.add_argument(
        "--no-discover",
        dest="discover",
        action="store_false",
        help="write no printers found here into the config",
    )
    parser.add_argument(
        "--cups-server", metavar="HOST:PORT", help="the CUPS scheduler to list queues of"
    )
    parser.add_argument(
        "--discover-seconds",
        type=float,
        default=3.0,
        metavar="SECONDS",
        help="how long to look for IPP printers on the network (default 3)",
    )
    return parser


# --- printers found here ---------------------------------------------------------------------


def _safe_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-") or "printer"


def cups_queues(server: str | None = None) -> list[PrinterSpec]:
    """The CUPS queues ``lpstat`` lists (none where CUPS is absent or not running)."""
    if shutil.which("lpstat") is None:
        return []
    try:
        queues = CupsSpooler(server=server).queues()
    except (OSError, subprocess.SubprocessError):
        return []
    return [PrinterSpec(q["name"], f"cups:{q['name']}", bool(q["is_default"])) for q in queues]


def _is_local_cups(uri: str) -> bool:
    """A CUPS queue of this machine announced over IPP: already listed as ``cups:``."""
    parts = urlsplit(uri)
    local = {"localhost", "127.0.0.1", "::1", socket.gethostname().lower()}
    host = (parts.hostname or "").lower().removesuffix(".local")
    return host in local and parts.path.startswith(("/printers/", "/classes/"))


def ipp_printers(seconds: float = 3.0) -> list[PrinterSpec]:
    """IPP printers DNS-SD announces (``ippfind``) that answer Get-Printer-Attributes."""
    if shutil.which("ippfind") is None or ipp.ipptool_missing():
        return []
    try:
        found = subprocess.run(
            ["ippfind", "-T", str(max(1, int(seconds))), "_ipp._tcp", "_ipps._tcp"],
            capture_output=True,
            timeout=seconds + 10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return []
    printers: list[PrinterSpec] = []
    for uri in dict.fromkeys(found.stdout.decode(errors="replace").split()):
        if not uri.startswith(("ipp://", "ipps://")) or _is_local_cups(uri):
            continue
        try:
            attributes = ipp.IppClient(uri, timeout=5).printer_attributes()
        except ipp.IppError:
            continue  # announced but not answering: not a printer this agent can use
        name = ipp.as_list(attributes.get("printer-name") or [urlsplit(uri).hostname])[0]
        printers.append(PrinterSpec(_safe_name(str(name)), uri))
    return printers


def discover(cups_server: str | None, seconds: float) -> list[PrinterSpec]:
    printers = cups_queues(cups_server)
    names = {p.name for p in printers}
    for printer in ipp_printers(seconds):
        name, n = printer.name, 2
        while name in names:
            name, n = f"{printer.name}-{n}", n + 1
        names.add(name)
        printers.append(PrinterSpec(name, printer.uri))
    return printers


# --- the files -------------------------------------------------------------------------------


def write_secret(path: Path, secret: str) -> None:
    """``secret`` into ``path``, mode 0600 from its first byte (a temporary file renamed)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(secret + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def _toml_string(value: str) -> str:
    return json.dumps(value)  # a JSON string is a valid TOML basic string


def complete_config(
    path: Path,
    url: str,
    printers: list[PrinterSpec],
    *,
    device: str | None = None,
    token_file: Path | None = None,
) -> Path:
    """Write ``path`` or complete it: ``url``, ``token_file`` and ``name`` (the device's, for
    the logs) when it has none, and the printers whose URI it does not list yet. What it
    already says (other settings, printers, comments) is kept as written. Returns the token
    file the config names (a relative one as the agent reads it: from the working directory)."""
    existing = path.read_text() if path.exists() else ""
    settings = read_toml(path) if existing else {}
    head: list[str] = []
    if not settings.get("urls"):
        head.append(f"url = {_toml_string(url)}")
    if settings.get("tokens_file"):
        token_path = Path(settings["tokens_file"])
    else:
        token_path = token_file or path.parent.resolve() / TOKEN_FILE_NAME
        head.append(f"token_file = {_toml_string(str(token_path))}")
    if device and not settings.get("name"):
        head.append(f"name = {_toml_string(device)}")
    known = {p.uri for p in settings.get("printers", [])}
    names = {p.name for p in settings.get("printers", [])}
    has_default = bool(settings.get("default_printer")) or any(
        p.default for p in settings.get("printers", [])
    )
    tables: list[str] = []
    for printer in printers:
        if printer.uri in known or printer.name in names:
            continue
        table = (
            f"[[printers]]\nname = {_toml_string(printer.name)}\n"
            f"uri = {_toml_string(printer.uri)}\n"
        )
        if printer.default and not has_default:
            table += "default = true\n"
            has_default = True
        tables.append(table)
    if not existing:
        head.insert(0, "# Written by 'qprint.agent enroll'; see docs/AGENT.md for every setting.")
    text = ("\n".join(head) + "\n" if head else "") + existing
    if tables:
        text = text.rstrip("\n") + "\n\n" + "\n".join(tables)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_text(text)
    os.replace(temporary, path)
    read_toml(path)  # what was written reads back
    return token_path


# --- the enrolment ---------------------------------------------------------------------------


def agent_info() -> dict[str, str]:
    return {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "python": platform.python_version(),
        "version": __version__,
    }


class EnrolmentEnded(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def _post(client: httpx.Client, url: str, body: dict) -> httpx.Response:
    return client.post(url, json=body, headers={"Accept": "application/json"})


def _error(response: httpx.Response) -> tuple[str, str]:
    try:
        body = response.json()
    except ValueError:
        return "", response.text[:200]
    if not isinstance(body, dict):
        return "", response.text[:200]
    return str(body.get("error", "")), str(body.get("message", ""))


def _answer(response: httpx.Response, fields: dict[str, type | tuple[type, ...]]) -> dict:
    """The JSON object of a successful answer, with ``fields`` of their types; an answer that is
    not (an HTML page, another application at that URL) ends the enrolment saying so."""
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict) and all(
        isinstance(body.get(name), kinds) and not isinstance(body.get(name), bool)
        for name, kinds in fields.items()
    ):
        return body
    raise EnrolmentEnded(
        REFUSED,
        f"{response.request.url} answered {response.status_code} with no qprint enrolment "
        "(is the URL where qprint is mounted, e.g. https://host/qprint/?)",
    )


def enrol(url: str, out, *, client: httpx.Client) -> dict[str, Any]:
    """Start an enrolment, tell the person the code, poll until it ends; the 200 body."""
    base = url if url.endswith("/") else url + "/"
    start_url = urljoin(base, "api/v1/device/enrollments")
    token_url = urljoin(base, "api/v1/device/enrollments/token")
    try:
        response = _post(client, start_url, {"agent_info": agent_info()})
    except httpx.HTTPError as exc:
        raise EnrolmentEnded(UNAVAILABLE, f"cannot reach {start_url}: {exc}") from None
    if response.status_code != 201:
        code, message = _error(response)
        raise EnrolmentEnded(
            REFUSED, f"the server refused the enrolment ({response.status_code} {code}): {message}"
        )
    started = _answer(
        response,
        {
            "device_code": str,
            "user_code": str,
            "verification_uri": str,
            "expires_in": (int, float),
            "interval": (int, float),
        },
    )
    minutes = max(1, round(started["expires_in"] / 60))
    print(
        f"To enrol this agent, open\n\n    {started['verification_uri']}\n\n"
        f"and enter the code\n\n    {started['user_code']}\n\n"
        f"(valid for {minutes} minutes; or open {started.get('verification_uri_complete', '-')}).\n"
        "Waiting for the approval...",
        file=out,
        flush=True,
    )
    interval = float(started["interval"])
    # The server's answer ends the wait; this only bounds it when the server cannot be reached.
    deadline = time.monotonic() + started["expires_in"] + 120
    while time.monotonic() < deadline:
        time.sleep(interval)
        try:
            response = _post(client, token_url, {"device_code": started["device_code"]})
        except httpx.HTTPError:
            continue  # the network or a node failed: poll again
        if response.status_code == 200:
            return _answer(response, {"token": str, "tenant": str, "device": str})
        code, message = _error(response)
        if response.status_code == 400 and code == "authorization_pending":
            continue
        if response.status_code == 400 and code == "slow_down":
            interval += SLOW_DOWN_SECONDS
            continue
        if response.status_code == 429 or response.status_code >= 500:
            retry_after = response.headers.get("Retry-After", "")
            if digits(retry_after):
                interval = max(interval, float(retry_after))
            continue
        if code == "access_denied":
            raise EnrolmentEnded(REFUSED, "an operator refused this enrolment")
        if code == "expired_token":
            raise EnrolmentEnded(REFUSED, "the code expired before anyone approved it; enrol again")
        raise EnrolmentEnded(
            REFUSED, f"enrolment failed ({response.status_code} {code}): {message}"
        )
    raise EnrolmentEnded(UNAVAILABLE, "the server could not be reached until the code expired")


def _cannot_write_beside(config: Path, settings: dict[str, Any]) -> str:
    """Why the config, or the token file its ``settings`` name (else ``device.token`` beside
    it), could not be written by this user, or ``""``: the token is handed out once, so a file
    that cannot be written would lose it. Each directory is made when missing, as the
    enrolment would."""
    token_dir = Path(settings["tokens_file"]).parent if settings.get("tokens_file") else None
    for directory in {config.parent, token_dir or config.parent}:
        where = directory.resolve()
        try:
            where.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            return f"cannot make {where}: {exc.strerror or exc}"
        if not os.access(where, os.W_OK | os.X_OK):
            return (
                f"cannot write in {where} as this user: the token is handed out once; run as "
                "a user who can, or give --config in a directory this user can write"
            )
    return ""


def enroll_main(argv: list[str], *, start_agent) -> int:
    args = build_parser().parse_args(argv)
    config = Path(args.config or default_config_path())
    try:  # refuse to complete a config the agent could not read
        settings = read_toml(config) if config.exists() else {}
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return USAGE
    cannot = _cannot_write_beside(config, settings)
    if cannot:  # known before the enrolment: its token is handed out once
        print(f"error: {cannot}", file=sys.stderr)
        return USAGE
    try:
        with httpx.Client(timeout=15) as client:
            granted = enrol(args.url, sys.stdout, client=client)
    except EnrolmentEnded as ended:
        print(f"error: {ended}", file=sys.stderr)
        return ended.status
    except KeyboardInterrupt:
        print("enrolment abandoned", file=sys.stderr)
        return 130
    printers = discover(args.cups_server, args.discover_seconds) if args.discover else []
    token_path = complete_config(config, args.url, printers, device=granted["device"])
    write_secret(token_path, granted["token"])
    print(
        f"Enrolled as device {granted['tenant']}/{granted['device']}. Token: {token_path} "
        f"(mode 0600); config: {config} ({len(printers)} printer(s) found here).",
        flush=True,
    )
    if not args.start:
        return 0
    settings = read_toml(config)
    if not settings.get("printers") and not settings.get("spooler"):
        print(
            f"No printer found here: add one to {config} ([[printers]] name and uri, see "
            "docs/AGENT.md), then start the agent with --config.",
            file=sys.stderr,
        )
        return 0
    return start_agent(["--config", str(config)])
