"""What one agent process is told: its servers, its devices and its printers.

Settings come from the command line and from a TOML file (``--config agent.toml``, read with the
standard library's ``tomllib``): the same settings under their long option names with ``_`` for
``-`` (``url``, ``token_file``, ``state_dir``, ``default_printer``...), and one ``[[printers]]``
table per printer (``name``, ``uri``, optional ``default = true``). The command line wins over
the file; ``--printer`` adds to the file's printers. A file's value is checked as the command
line's is (its type, its range, its choices), and a mistake is one line and exit status 64.
"""

import argparse
import math
import os
import re
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from qprint.agent.printers import PrinterSpec, check_uri


@dataclass(frozen=True)
class DeviceConfig:
    """One device: a name for the logs, its secret token and where its journal lives."""

    name: str
    token: str
    journal_path: Path


@dataclass(frozen=True)
class AgentConfig:
    urls: list[str]
    devices: list[DeviceConfig]
    spooler: str = "null"
    spool_dir: str | None = None
    cups_queue: str | None = None
    cups_server: str | None = None
    backoff_initial: float = 0.5
    backoff_max: float = 30.0
    follow_timeout: float = 600.0
    shutdown_grace: float = 30.0
    report_printers: bool = True
    #: "auto"/"socket": claims and reports as socket frames when the server offers them;
    #: "http": always HTTP.
    operations: str = "auto"
    journal_retention_days: float = 30.0
    printers: list[PrinterSpec] = field(default_factory=list)
    default_printer: str | None = None
    printers_poll_seconds: float = 60.0
    socket_connect_timeout: float = 10.0
    socket_write_timeout: float = 30.0
    extra: dict[str, str] = field(default_factory=dict)


_SAFE_NAME = re.compile(r"[^A-Za-z0-9_.-]+")


#: The exit status of bad arguments or settings (``EX_USAGE``): argparse's own 2 is the agent's
#: "a token was refused".
BAD_ARGUMENTS = 64


class ArgumentParser(argparse.ArgumentParser):
    """argparse, exiting :data:`BAD_ARGUMENTS` on a mistake."""

    def error(self, message: str):
        self.print_usage(sys.stderr)
        self.exit(BAD_ARGUMENTS, f"{self.prog}: error: {message}\n")


def _number_of_seconds(text: str | float, *, zero: bool) -> float:
    try:
        value = float(text)
    except (TypeError, ValueError):
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not (math.isfinite(value) and (value >= 0 if zero else value > 0)):
        least = "0 or more" if zero else "above 0"
        raise argparse.ArgumentTypeError(f"expected a number of seconds {least}, got {text!r}")
    return value


def seconds(text: str | float) -> float:
    """A number of seconds above zero (an argparse ``type``; a TOML number too)."""
    return _number_of_seconds(text, zero=False)


def grace(text: str | float) -> float:
    """A number of seconds, 0 or more (an argparse ``type``; a TOML number too)."""
    return _number_of_seconds(text, zero=True)


def count(text: str | int) -> int:
    """A whole number, 0 or more (an argparse ``type``; a TOML integer too)."""
    try:
        value = int(text)
    except (TypeError, ValueError):
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 0 or (isinstance(text, float) and not text.is_integer()):
        raise argparse.ArgumentTypeError(f"expected a whole number, 0 or more, got {text!r}")
    return value


#: The types of the options that take a number.
NUMBERS = (seconds, grace, count, int, float)


def checked_defaults(parser: argparse.ArgumentParser, path: str, defaults: dict[str, Any]):
    """The TOML file's settings, each checked as its option's value is on the command line (the
    option's type, its choices; a switch takes true or false, a path or a name a string):
    argparse itself checks neither a default that is not a string nor a default's choice."""
    actions = {action.dest: action for action in parser._actions}
    checked: dict[str, Any] = {}
    for dest, value in defaults.items():
        action = actions.get(dest)
        if dest in ("printers", "urls") or action is None:  # read_toml checked them
            checked[dest] = value
            continue
        where = f"--config {path}: {dest}"
        if isinstance(action, argparse._StoreConstAction):  # a switch (report_printers)
            if not isinstance(value, bool):
                raise ValueError(f"{where} must be true or false, got {value!r}")
        elif action.type in NUMBERS:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(f"{where} must be a number, got {value!r}")
            try:
                value = action.type(value)
            except (argparse.ArgumentTypeError, ValueError) as exc:
                raise ValueError(f"{where}: {exc}") from None
        elif not isinstance(value, str):
            raise ValueError(f"{where} must be a string, got {value!r}")
        elif action.type is not None:
            value = action.type(value)
        if action.choices is not None and value not in action.choices:
            choices = ", ".join(map(str, action.choices))
            raise ValueError(f"{where} must be one of {choices}, got {value!r}")
        checked[dest] = value
    return checked


def journal_path(state_dir: str | Path, name: str) -> Path:
    return Path(state_dir) / f"{_SAFE_NAME.sub('_', name)}.journal.sqlite3"


def read_tokens_file(path: str | Path) -> list[tuple[str | None, str]]:
    """Lines ``NAME TOKEN`` or ``TOKEN`` (blank lines and ``#`` comments skipped); ``ValueError``
    naming a file that cannot be read."""
    try:
        text = Path(path).read_text()
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ValueError(f"token file {path}: {reason}") from None
    entries: list[tuple[str | None, str]] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split()
        if len(parts) == 1:
            entries.append((None, parts[0]))
        else:
            entries.append((parts[0], parts[-1]))
    return entries


def devices_from(
    *,
    tokens: list[str],
    tokens_file: str | None,
    name: str,
    count: int,
    state_dir: str | Path,
) -> list[DeviceConfig]:
    """The devices this process runs: ``count`` of them, named ``name`` or ``name-<i>``. Each
    device's journal directory, ``state_dir``, is made now and must be writable."""
    _writable_directory(state_dir)
    entries: list[tuple[str | None, str]] = [(None, t) for t in tokens]
    if tokens_file:
        entries += read_tokens_file(tokens_file)
    if not entries and os.environ.get("QPRINT_AGENT_TOKEN"):
        entries.append((None, os.environ["QPRINT_AGENT_TOKEN"]))
    if not entries:
        raise ValueError("no device token: give --token, --tokens-file or QPRINT_AGENT_TOKEN")
    count = count or len(entries)
    if len(entries) < count:
        raise ValueError(f"--devices {count} needs {count} tokens, got {len(entries)}")
    devices = []
    for i, (entry_name, token) in enumerate(entries[:count]):
        device_name = entry_name or (name if count == 1 else f"{name}-{i + 1}")
        devices.append(DeviceConfig(device_name, token, journal_path(state_dir, device_name)))
    return devices


def _writable_directory(path: str | Path) -> None:
    """``path`` made (with its parents) when missing; ``ValueError`` when it cannot be, or when
    this user cannot write in it."""
    try:
        Path(path).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ValueError(f"--state-dir {path}: {exc.strerror or exc}") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise ValueError(f"--state-dir {path}: this user ({_user()}) cannot write there")


def _user() -> str:
    try:
        import pwd

        return pwd.getpwuid(os.getuid()).pw_name
    except (ImportError, KeyError):  # not POSIX, or a uid without a name
        return str(os.getuid()) if hasattr(os, "getuid") else "?"


# TOML keys and the argparse destination each one sets.
TOML_KEYS = {
    "url": "urls",
    "urls": "urls",
    "token_file": "tokens_file",
    "tokens_file": "tokens_file",
    "name": "name",
    "devices": "devices",
    "state_dir": "state_dir",
    "spooler": "spooler",
    "spool_dir": "spool_dir",
    "cups_queue": "cups_queue",
    "cups_server": "cups_server",
    "default_printer": "default_printer",
    "printers_poll": "printers_poll",
    "socket_connect_timeout": "socket_connect_timeout",
    "socket_write_timeout": "socket_write_timeout",
    "follow_timeout": "follow_timeout",
    "backoff_initial": "backoff_initial",
    "backoff_max": "backoff_max",
    "shutdown_grace": "shutdown_grace",
    "report_printers": "report_printers",
    "operations": "operations",
    "log_level": "log_level",
}


def read_toml(path: str | Path) -> dict[str, Any]:
    """The argparse defaults an ``agent.toml`` sets; ``ValueError`` naming a bad key or table."""
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except OSError as exc:
        raise ValueError(f"--config {path}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"--config {path}: {exc}") from None
    defaults: dict[str, Any] = {}
    for key, value in data.items():
        if key == "printers":
            defaults["printers"] = _toml_printers(path, value)
        elif key == "token":
            raise ValueError(
                f"--config {path}: a token does not belong in the file; give token_file "
                "(or QPRINT_AGENT_TOKEN)"
            )
        elif key in TOML_KEYS:
            if key in ("url", "urls"):
                value = [value] if isinstance(value, str) else value
                if not (isinstance(value, list) and all(isinstance(url, str) for url in value)):
                    raise ValueError(
                        f"--config {path}: urls must be a URL or a list of URLs, got {value!r}"
                    )
            defaults[TOML_KEYS[key]] = value
        else:
            raise ValueError(f"--config {path}: unknown setting {key!r}")
    return defaults


def _toml_printers(path: str | Path, tables: Any) -> list[PrinterSpec]:
    if not isinstance(tables, list):
        raise ValueError(f"--config {path}: write each printer as a [[printers]] table")
    specs = []
    for i, table in enumerate(tables):
        if not isinstance(table, dict) or not {"name", "uri"} <= table.keys():
            raise ValueError(f"--config {path}: printers[{i}] needs a name and a uri")
        unknown = set(table) - {"name", "uri", "default"}
        if unknown:
            raise ValueError(
                f"--config {path}: printers[{i}]: unknown {', '.join(sorted(unknown))}"
            )
        try:
            check_uri(str(table["uri"]))
        except ValueError as exc:
            raise ValueError(f"--config {path}: printers[{i}]: {exc}") from None
        specs.append(
            PrinterSpec(str(table["name"]), str(table["uri"]), bool(table.get("default", False)))
        )
    return specs
