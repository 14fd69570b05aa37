"""``python -m qprint.agent`` / ``manage.py qprint_agent`` / ``qprint-agent``: the command line."""

import argparse
import asyncio
import logging
import os
import signal
import sys
import tempfile

from qprint.agent import __version__
from qprint.agent.config import (
    BAD_ARGUMENTS,
    AgentConfig,
    ArgumentParser,
    checked_defaults,
    count,
    devices_from,
    grace,
    read_toml,
    seconds,
)
from qprint.agent.enrol import enroll_main
from qprint.agent.printers import backend_for, make_printers, parse_printer_argument, spooler_uri
from qprint.agent.protocol import Endpoints
from qprint.agent.simulator import Fleet
from qprint.agent.systemd import unit_main
from qprint.core import event_loop

DESCRIPTION = """\
The reference qprint print agent. It holds one realtime socket per device to a qprint server,
claims the device's print jobs, downloads and verifies each document (size and sha256), hands it
to a spooler and reports what happened. A local journal (SQLite) makes sure that a job is never
printed twice: a job already final is never submitted again, and a submission interrupted by a
crash is reported OUTCOME_UNKNOWN instead of being printed again.
"""

EPILOG = """\
exit status: 0 stopped on SIGTERM/SIGINT; 2 the server refused a device's token (401/403);
3 the server disabled a device or revoked its token (close 4001); 64 bad arguments (among them:
no printer given; --printer NAME=null: is the explicit way to print nothing).

commands:
  enroll URL [--config agent.toml]   become a device by a code an operator approves, write the
                                     token and the config, then run (enroll --help)
  systemd-unit [--install]           print (or install and start) a systemd unit (--help)

examples:
  python -m qprint.agent enroll https://print.example.com/qprint/
  python -m qprint.agent --url http://127.0.0.1:8000/qprint/ --token-file device.token \\
      --printer office=cups:Office --printer labels=socket://10.0.0.9:9100 \\
      --printer lobby=ipp://10.0.0.7/ipp/print --default-printer office
  python -m qprint.agent --config /etc/qprint/agent.toml
  python -m qprint.agent systemd-unit --config /etc/qprint/agent.toml > qprint-agent.service
  python -m qprint.agent --url http://lb/qprint/ --devices 20 --tokens-file tokens.txt \\
      --spooler directory --spool-dir /tmp/printed
"""


LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")

NO_PRINTER = (
    "no printer: give one, e.g. --printer office=cups:Office (a CUPS queue), "
    "--printer labels=socket://10.0.0.9:9100, --printer lobby=ipp://10.0.0.7/ipp/print or "
    "--printer desk=dir:/var/spool/qprint (one file per job); to accept jobs and print nothing "
    "(a test), say so: --printer test=null: (jobs are reported PRINTED)"
)


def _printer_argument(text: str):
    try:
        return parse_printer_argument(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(
        prog="python -m qprint.agent",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--config",
        metavar="FILE",
        help="a TOML file with the same settings (long option names, '_' for '-') and one "
        "[[printers]] table (name, uri, default) per printer; the command line wins",
    )
    server = parser.add_argument_group("server")
    server.add_argument(
        "--url",
        action="append",
        dest="urls",
        default=[],
        metavar="URL",
        help="where qprint is mounted, e.g. http://lb:8000/qprint/ (the socket is URL + "
        "ws/device/). Repeat for several nodes: the agent moves to the next one when a "
        "connection fails or a node drains. Default: $QPRINT_AGENT_URLS (comma separated).",
    )
    server.add_argument(
        "--backoff-initial",
        type=seconds,
        default=0.5,
        metavar="SECONDS",
        help="first reconnect delay; each failure doubles it, with jitter (default 0.5)",
    )
    server.add_argument(
        "--backoff-max",
        type=seconds,
        default=30.0,
        metavar="SECONDS",
        help="longest reconnect delay (default 30)",
    )
    devices = parser.add_argument_group("devices")
    devices.add_argument(
        "--token",
        action="append",
        dest="tokens",
        default=[],
        metavar="TOKEN",
        help="a device token (prefer --token-file or $QPRINT_AGENT_TOKEN: arguments are visible "
        "to other users of the machine). Repeat for several devices.",
    )
    devices.add_argument(
        "--token-file",
        "--tokens-file",
        dest="tokens_file",
        metavar="FILE",
        help="a file with one device per line: TOKEN, or NAME TOKEN",
    )
    devices.add_argument(
        "--name",
        default="device",
        help="device name in the logs (default 'device'; with "
        "--devices N, NAME-1 .. NAME-N unless the tokens file names them)",
    )
    devices.add_argument(
        "--devices",
        type=count,
        default=0,
        metavar="N",
        help="run N simulated devices in this process, one per token (default: one per token)",
    )
    devices.add_argument(
        "--state-dir",
        default=os.environ.get("QPRINT_AGENT_STATE_DIR")
        or os.path.join(tempfile.gettempdir(), "qprint-agent"),
        help="where each device's journal (NAME.journal.sqlite3) lives; keep it across restarts "
        "(default $QPRINT_AGENT_STATE_DIR or %(default)s)",
    )
    printers = parser.add_argument_group("printers")
    printers.add_argument(
        "--printer",
        action="append",
        dest="printers",
        type=_printer_argument,
        default=[],
        metavar="NAME=URI",
        help="a printer of this agent, by device URI: cups:QUEUE (cups: = the CUPS default), "
        "ipp://host[:port]/path or ipps://..., socket://host[:port] (raw, port 9100), "
        "dir:PATH, null:. Repeat for several; a job's printer picks one by NAME.",
    )
    printers.add_argument(
        "--default-printer",
        metavar="NAME",
        help="the printer of jobs without one (default: the first --printer)",
    )
    printers.add_argument(
        "--printers-poll",
        type=seconds,
        default=60.0,
        metavar="SECONDS",
        help="how often the printers' state and capabilities are read; they are sent to the "
        "server at connect and whenever they change (default 60)",
    )
    printers.add_argument(
        "--socket-connect-timeout",
        type=seconds,
        default=10.0,
        metavar="SECONDS",
        help="socket:// printers: connect timeout (default 10)",
    )
    printers.add_argument(
        "--socket-write-timeout",
        type=seconds,
        default=30.0,
        metavar="SECONDS",
        help="socket:// printers: longest wait for the printer to take more bytes (default 30)",
    )
    spool = parser.add_argument_group("spooler (one printer, without --printer)")
    spool.add_argument(
        "--spooler",
        choices=["cups", "directory", "null"],
        default=None,
        help="cups: submit with lp to --cups-queue (only) and follow the CUPS job; "
        "directory: write each document to --spool-dir once; null: accept and discard "
        "(reported PRINTED). Without --printer or --spooler the agent refuses to start.",
    )
    spool.add_argument("--spool-dir", metavar="DIR", help="directory of the directory spooler")
    spool.add_argument(
        "--cups-queue",
        metavar="QUEUE",
        help="CUPS queue for jobs without a printer (default: the CUPS default destination); "
        "CUPS_SERVER selects the CUPS server as for lp",
    )
    spool.add_argument(
        "--cups-server",
        metavar="HOST:PORT",
        help="CUPS scheduler to use (given to lp/lpstat/cancel as -h; default: CUPS_SERVER or "
        "the local scheduler)",
    )
    spool.add_argument(
        "--follow-timeout",
        type=seconds,
        default=600.0,
        metavar="SECONDS",
        help="how long to follow a spooled job before reporting OUTCOME_UNKNOWN (default 600)",
    )
    spool.add_argument(
        "--no-report-printers",
        dest="report_printers",
        action="store_false",
        help="do not send the spooler's printers to the server on connect",
    )
    parser.add_argument(
        "--operations",
        choices=("auto", "push", "socket", "http"),
        default="auto",
        help="take pushed assignments and report as socket frames when the server offers them "
        "(auto, push: the same), claim and report as socket frames without push (socket), or "
        "claim and report over HTTP (http)",
    )
    parser.add_argument(
        "--shutdown-grace",
        type=grace,
        default=30.0,
        metavar="SECONDS",
        help="on SIGTERM, how long to let a job in progress finish (default 30)",
    )
    parser.add_argument(
        "--log-level",
        default=os.environ.get("QPRINT_AGENT_LOG_LEVEL", "INFO"),
        type=str.upper,
        choices=LOG_LEVELS,
        help="default INFO",
    )
    parser.add_argument("--version", action="version", version=f"qprint-agent {__version__}")
    return parser


def config_from(args: argparse.Namespace) -> AgentConfig:
    urls = args.urls or [u for u in os.environ.get("QPRINT_AGENT_URLS", "").split(",") if u]
    if not urls:
        raise ValueError("no server: give --url or QPRINT_AGENT_URLS")
    for url in urls:
        Endpoints.from_url(url)  # a URL the agent cannot connect to is named now
    if args.spooler == "directory" and not args.spool_dir:
        raise ValueError("--spooler directory needs --spool-dir")
    if args.printers and args.spooler:
        raise ValueError("give printers (--printer) or --spooler, not both")
    if args.default_printer and args.default_printer not in {p.name for p in args.printers}:
        raise ValueError(f"--default-printer {args.default_printer!r} is not a --printer")
    devices = devices_from(
        tokens=args.tokens,
        tokens_file=args.tokens_file,
        name=args.name,
        count=args.devices,
        state_dir=args.state_dir,
    )
    if not args.printers and not args.spooler:
        raise ValueError(NO_PRINTER)
    return AgentConfig(
        urls=urls,
        devices=devices,
        spooler=args.spooler or "printers",
        spool_dir=args.spool_dir,
        cups_queue=args.cups_queue,
        cups_server=args.cups_server,
        backoff_initial=args.backoff_initial,
        backoff_max=args.backoff_max,
        follow_timeout=args.follow_timeout,
        shutdown_grace=args.shutdown_grace,
        report_printers=args.report_printers,
        operations=args.operations,
        printers=list(args.printers),
        default_printer=args.default_printer,
        printers_poll_seconds=args.printers_poll,
        socket_connect_timeout=args.socket_connect_timeout,
        socket_write_timeout=args.socket_write_timeout,
    )


def make_backend(config: AgentConfig):
    if config.printers:
        return make_printers(
            config.printers,
            config.default_printer,
            cups_server=config.cups_server,
            socket_timeouts=(config.socket_connect_timeout, config.socket_write_timeout),
        )
    # One printer named by --spooler: the same registry, CUPS polled every 0.5 s as before.
    uri = spooler_uri(config.spooler, directory=config.spool_dir, queue=config.cups_queue)
    return backend_for(uri, cups_server=config.cups_server, poll_interval=0.5)


async def run(config: AgentConfig, spooler=None) -> int:
    spooler = spooler or make_backend(config)
    fleet = Fleet(config, spooler)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, fleet.request_stop)
    status = await fleet.run()
    logging.getLogger("qprint.agent").info("agent_stopped status=%d", status)
    return status


def parse(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """Parse twice: once to find ``--config``, then with the file's settings as defaults.

    The device token: ``--token`` or ``--token-file`` on the command line, else
    ``$QPRINT_AGENT_TOKEN``, else the file's ``token_file`` (a service started with an
    environment file holding the token never reads the root-only file the config names)."""
    args = parser.parse_args(argv)
    if args.config:
        defaults = checked_defaults(parser, args.config, read_toml(args.config))
        if args.tokens or args.tokens_file or os.environ.get("QPRINT_AGENT_TOKEN"):
            defaults.pop("tokens_file", None)
        cli_printers = list(args.printers)
        parser.set_defaults(**defaults)
        args = parser.parse_args(argv)
        args.printers = defaults.get("printers", []) + cli_printers
    if args.log_level not in LOG_LEVELS:  # $QPRINT_AGENT_LOG_LEVEL: a default, never checked
        raise ValueError(
            f"log level must be one of {', '.join(LOG_LEVELS)}, got {args.log_level!r}"
        )
    return args


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["systemd-unit"]:
        return unit_main(argv[1:])
    if argv[:1] == ["enroll"]:
        return enroll_main(argv[1:], start_agent=main)
    parser = build_parser()
    try:
        args = parse(parser, argv)
    except ValueError as exc:
        parser.print_usage(sys.stderr)
        print(f"error: {exc}", file=sys.stderr)
        return BAD_ARGUMENTS
    logging.basicConfig(
        level=args.log_level,
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
        stream=sys.stderr,
    )
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per request is noise
    logging.getLogger("websockets").setLevel(logging.WARNING)
    try:
        config = config_from(args)
        spooler = make_backend(config)  # a bad printer set is named before anything starts
    except (ValueError, OSError) as exc:  # OSError: a printer's directory that cannot be made
        parser.print_usage(sys.stderr)
        print(f"error: {exc}", file=sys.stderr)
        return BAD_ARGUMENTS
    return event_loop.run(run(config, spooler))  # uvloop's loop when installed


if __name__ == "__main__":
    sys.exit(main())
