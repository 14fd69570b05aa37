"""``python -m qprint.agent systemd-unit``: a systemd unit that runs the agent as a service.

The unit restarts the agent when it fails (not when a person disabled the device: exit 2 and 3
are left stopped, see docs/AGENT.md), keeps the journal in a ``StateDirectory`` that survives
reboots and upgrades, and reads the device token from a systemd credential file
(``LoadCredential``) or from an ``EnvironmentFile``, never from the command line, which every
user of the machine can read in ``ps``.

``--install`` does the rest as root: the agent's ``.pyz`` copied to a fixed place (when it runs
from one), the service user, the credentials file (the token file the config names, copied with
mode 0600 when it is elsewhere), the unit, then ``systemctl daemon-reload`` and ``enable
--now``. ``--dry-run`` prints those steps and writes nothing.
"""

import argparse
import os
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from qprint.agent.config import BAD_ARGUMENTS, ArgumentParser, read_toml

SERVICE = "qprint-agent.service"
UNIT_PATH = Path("/etc/systemd/system") / SERVICE
PYZ_HOME = Path("/usr/local/lib/qprint-agent/qprint-agent.pyz")
#: Exit status when systemd (or root) is missing: EX_UNAVAILABLE / EX_NOPERM.
NO_SYSTEMD = 69
NOT_ROOT = 77

UNIT = """\
[Unit]
Description=qprint print agent
Wants=network-online.target
After=network-online.target cups.service

[Service]
Type=simple
User={user}
Group={group}
SupplementaryGroups=lp
# The journal (one SQLite file per device) lives here, kept across restarts and reboots.
StateDirectory=qprint-agent
StateDirectoryMode=0700
Environment=QPRINT_AGENT_STATE_DIR=%S/qprint-agent
{token}ExecStart={exec_start}
Restart=on-failure
RestartSec=5
# 2: the server refused the token, 3: the device was disabled; a person must act first.
RestartPreventExitStatus=2 3 64
TimeoutStopSec={stop_timeout}
KillMode=mixed
NoNewPrivileges=yes
ProtectSystem=strict
ProtectHome=yes
PrivateTmp=yes

[Install]
WantedBy=multi-user.target
"""


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(
        prog="python -m qprint.agent systemd-unit",
        description="Print a systemd unit file for the agent to standard output.",
    )
    parser.add_argument("--config", default="/etc/qprint/agent.toml", help="the agent.toml")
    parser.add_argument(
        "--python",
        default=sys.executable,
        help="the interpreter that has django-qprint installed (default: this one)",
    )
    parser.add_argument("--user", default="qprint", help="the service user (default qprint)")
    parser.add_argument("--group", default="qprint", help="the service group (default qprint)")
    token = parser.add_mutually_exclusive_group()
    token.add_argument(
        "--token-credential",
        default="/etc/qprint/device.token",
        metavar="FILE",
        help="the device token file, given to the service as the systemd credential "
        "'device-token' (default /etc/qprint/device.token, readable by root only)",
    )
    token.add_argument(
        "--environment-file",
        metavar="FILE",
        help="instead: a file with QPRINT_AGENT_TOKEN=... (mode 0600) read by systemd",
    )
    parser.add_argument(
        "--install",
        action="store_true",
        help="as root: install the unit and the credentials file, then enable and start the "
        f"service (the agent's .pyz is copied to {PYZ_HOME} first when it runs from one)",
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="with --install: print what would be done, change nothing",
    )
    parser.add_argument(
        "--stop-timeout",
        type=int,
        default=45,
        metavar="SECONDS",
        help="how long systemd waits after SIGTERM (keep it above --shutdown-grace; default 45)",
    )
    return parser


def running_pyz() -> Path | None:
    """The ``.pyz`` this agent runs from, if it does (``python3 qprint-agent.pyz ...``)."""
    main = sys.modules.get("__main__")
    archive = getattr(getattr(main, "__loader__", None), "archive", None)
    if archive and os.path.isfile(archive):
        return Path(archive).resolve()
    return None


def render(args: argparse.Namespace, pyz: Path | None = None) -> str:
    if pyz is not None:
        command = [args.python, str(pyz), "--config", args.config]
    else:
        command = [args.python, "-m", "qprint.agent", "--config", args.config]
    if args.environment_file:
        token = f"EnvironmentFile={args.environment_file}\n"
    else:
        # systemd copies the file to $CREDENTIALS_DIRECTORY, readable by the service only.
        token = f"LoadCredential=device-token:{args.token_credential}\n"
        command += ["--token-file", "${CREDENTIALS_DIRECTORY}/device-token"]
    exec_start = " ".join(part if part.startswith("${") else shlex.quote(part) for part in command)
    return UNIT.format(
        user=args.user,
        group=args.group,
        token=token,
        exec_start=exec_start,
        stop_timeout=args.stop_timeout,
    )


@dataclass
class Step:
    """One step of ``--install``: what it says in ``--dry-run``, and what it does."""

    says: str
    act: object  # a callable of no arguments


def systemd_missing() -> str | None:
    """Why systemd cannot run the service here, or None."""
    if shutil.which("systemctl") is None:
        return "systemctl is not installed"
    if not os.path.isdir("/run/systemd/system"):
        return "systemd is not running on this machine (no /run/systemd/system)"
    return None


def _copy_secret(source: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
    data = source.read_bytes()
    temporary = target.with_name(f".{target.name}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(temporary, target)


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _run(*command: str) -> None:
    subprocess.run(command, check=True)


def _user_exists(user: str) -> bool:
    import pwd

    try:
        pwd.getpwnam(user)
    except KeyError:
        return False
    return True


def install_steps(args: argparse.Namespace, pyz: Path | None) -> list[Step]:
    steps: list[Step] = []
    if pyz is not None and pyz != PYZ_HOME:
        steps.append(
            Step(
                f"copy {pyz} to {PYZ_HOME}",
                lambda: (
                    PYZ_HOME.parent.mkdir(parents=True, exist_ok=True),
                    shutil.copy2(pyz, PYZ_HOME),
                ),
            )
        )
        pyz = PYZ_HOME
    if not _user_exists(args.user):
        steps.append(
            Step(
                f"create the system user {args.user} (home /var/lib/qprint-agent, no login)",
                lambda: _run(
                    "useradd",
                    "--system",
                    "--user-group",
                    "--home-dir",
                    "/var/lib/qprint-agent",
                    "--shell",
                    "/usr/sbin/nologin",
                    args.user,
                ),
            )
        )
    if not args.environment_file:
        credential = Path(args.token_credential)
        named = read_toml(args.config).get("tokens_file") if os.path.exists(args.config) else None
        if named and Path(named).resolve() != credential.resolve():
            steps.append(
                Step(
                    f"copy the token file {named} to the credentials file {credential} (mode 0600)",
                    lambda: _copy_secret(Path(named), credential),
                )
            )
        elif not credential.exists():
            raise SystemExit(
                f"error: no token file {credential}: enrol first (python3 qprint-agent.pyz "
                "enroll URL) or give --token-credential"
            )
        else:
            steps.append(
                Step(
                    f"use the credentials file {credential} (mode 0600)",
                    lambda: credential.chmod(0o600),
                )
            )
    unit = render(args, pyz)
    steps.append(Step(f"write {UNIT_PATH}:\n\n{unit}", lambda: _write(UNIT_PATH, unit)))
    steps.append(Step("systemctl daemon-reload", lambda: _run("systemctl", "daemon-reload")))
    steps.append(
        Step(
            f"systemctl enable --now {SERVICE}",
            lambda: _run("systemctl", "enable", "--now", SERVICE),
        )
    )
    return steps


def install(args: argparse.Namespace) -> int:
    missing = systemd_missing()
    if missing and not args.dry_run:
        print(
            f"error: cannot install the service: {missing}. Run the agent another way (e.g. "
            f"'python3 qprint-agent.pyz --config {args.config}' under your own supervisor), or "
            "print the unit with 'systemd-unit' (without --install) for a machine that has "
            "systemd.",
            file=sys.stderr,
        )
        return NO_SYSTEMD
    if not args.dry_run and os.geteuid() != 0:
        print("error: --install needs root (run it with sudo)", file=sys.stderr)
        return NOT_ROOT
    steps = install_steps(args, running_pyz())
    if args.dry_run:
        print("Would:")
        for number, step in enumerate(steps, 1):
            print(f"{number}. {step.says}")
        if missing:
            print(f"(and could not here: {missing})")
        return 0
    for step in steps:
        print(step.says.splitlines()[0], flush=True)
        step.act()
    print(f"{SERVICE} is enabled and started; follow it with: journalctl -u {SERVICE} -f")
    return 0


def unit_main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    if args.install:
        try:
            return install(args)
        except ValueError as exc:  # a config the agent could not read: nothing is installed
            print(f"error: {exc}", file=sys.stderr)
            return BAD_ARGUMENTS
    if args.dry_run:
        print("error: --dry-run goes with --install", file=sys.stderr)
        return BAD_ARGUMENTS
    sys.stdout.write(render(args, running_pyz()))
    return 0
