"""The long form of the chaos test, as a benchmark: ``python tests/bench/chaos.py --jobs 10000``.

Runs ``tests/chaos/test_guarantee.py`` (same faults, same checks) with more jobs and prints the
figures for docs/PERFORMANCE.md: jobs, devices, seconds submitting, seconds until every job was
final, throughput, statuses, OUTCOME_UNKNOWN, faults. Needs DATABASE_URL/REDIS_URL like the suite.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10000)
    parser.add_argument("--devices", type=int, default=20)
    parser.add_argument(
        "--submit-seconds",
        type=float,
        default=0,
        help="spread the submissions over this long (0: as fast as the API takes them)",
    )
    parser.add_argument("--submitters", type=int, default=4, help="parallel submitting clients")
    parser.add_argument(
        "--fault-pause", type=float, default=5, help="seconds of traffic between two faults"
    )
    args = parser.parse_args()
    report_path = Path(tempfile.mkstemp(prefix="qprint-chaos-", suffix=".json")[1])
    env = {
        **os.environ,
        "QPRINT_CHAOS_JOBS": str(args.jobs),
        "QPRINT_CHAOS_DEVICES": str(args.devices),
        "QPRINT_CHAOS_SUBMIT_SECONDS": str(args.submit_seconds),
        "QPRINT_CHAOS_REPORT": str(report_path),
        "QPRINT_CHAOS_SUBMITTERS": str(args.submitters),
        "QPRINT_CHAOS_FAULT_PAUSE": str(args.fault_pause),
    }
    started = time.monotonic()
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "tests/chaos/test_guarantee.py",
            "-q",
            "-s",
            "-p",
            "no:cacheprovider",
        ],
        cwd=REPO_ROOT,
        env=env,
        check=False,
    )
    wall = time.monotonic() - started
    report = json.loads(report_path.read_text() or "{}") if report_path.stat().st_size else {}
    report_path.unlink()
    if report:
        report["wall_seconds"] = round(wall, 1)
        report["jobs_per_second_end_to_end"] = round(
            report["jobs"] / report["seconds_until_all_final"], 1
        )
        print(json.dumps(report, indent=2))
    return result.returncode


if __name__ == "__main__":
    sys.exit(main())
