"""``python -m qprint.agent systemd-unit``: a systemd unit that runs the agent as a service.

The unit restarts the agent when it fails (not when a person disabled the device: exit 2 and 3
are left stopped, see docs/AGENT.md), keeps the journal in a ``StateDirectory`` that survives
reboots and upgrades, and reads the device token from a systemd credential file
(``LoadCredential``) or from an ``EnvironmentFile``, never from the command line, which every
user of the machine can read in ``ps``.
"""

import argparse
import shlex
import sys

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
    parser = argparse.ArgumentParser(
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
        "--stop-timeout",
        type=int,
        default=45,
        metavar="SECONDS",
        help="how long systemd waits after SIGTERM (keep it above --shutdown-grace; default 45)",
    )
    return parser


def render(args: argparse.Namespace) -> str:
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


def unit_main(argv: list[str]) -> int:
    sys.stdout.write(render(build_parser().parse_args(argv)))
    return 0
