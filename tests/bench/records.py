"""Reading the benchmarks' JSON records of docs/bench/: where they are, one record by name and
label, a value deep in it, the machine's load during its run. Shared by the report's tables
(tests/bench/report.py) and its plots (tests/bench/plots.py)."""

from __future__ import annotations

import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "docs" / "bench"


def load(name: str, label: str = "") -> dict | None:
    path = RESULTS / (f"{name}.{label}.json" if label else f"{name}.json")
    return json.loads(path.read_text()) if path.exists() else None


def get(record: dict | None, *keys):
    value = record
    for key in keys:
        if isinstance(value, list) and isinstance(key, int):
            if not -len(value) <= key < len(value):
                return None
            value = value[key]
            continue
        if not isinstance(value, dict) or key not in value:
            return None
        value = value[key]
    return value


def machine(record: dict | None) -> str:
    if not record:
        return ""
    m = record["machine"]
    text = (
        f"load {m['load_average_1m']['mean']} (max {m['load_average_1m']['max']}), "
        f"others {m['other_processes_cores']['mean']} cores"
    )
    speed = m.get("speed_probe_ms") or {}
    if "start" in speed and "end" in speed:
        text += f", probe {speed['start']} / {speed['end']} ms"
    return text
