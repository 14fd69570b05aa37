"""What one agent process is told: its servers, its devices and its spooler."""

import os
import re
from dataclasses import dataclass, field
from pathlib import Path


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
    extra: dict[str, str] = field(default_factory=dict)


_SAFE_NAME = re.compile(r"[^A-Za-z0-9_.-]+")


def journal_path(state_dir: str | Path, name: str) -> Path:
    return Path(state_dir) / f"{_SAFE_NAME.sub('_', name)}.journal.sqlite3"


def read_tokens_file(path: str | Path) -> list[tuple[str | None, str]]:
    """Lines ``NAME TOKEN`` or ``TOKEN`` (blank lines and ``#`` comments skipped)."""
    entries: list[tuple[str | None, str]] = []
    for raw in Path(path).read_text().splitlines():
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
    """The devices this process runs: ``count`` of them, named ``name`` or ``name-<i>``."""
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
