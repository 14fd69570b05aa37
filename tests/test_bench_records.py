"""The benchmarks' report says on what machine each figure ran."""

from tests.bench import records
from tests.bench.report import verdict


def test_the_machine_column_shows_the_speed_probe_where_a_run_recorded_it():
    record = {
        "machine": {
            "load_average_1m": {"mean": 1.0, "max": 2.0},
            "other_processes_cores": {"mean": 0.1, "max": 0.3},
        }
    }
    assert records.machine(record) == "load 1.0 (max 2.0), others 0.1 cores"  # an older run
    record["machine"]["speed_probe_ms"] = {"start": 95.0, "end": 180.2}
    assert records.machine(record) == "load 1.0 (max 2.0), others 0.1 cores, probe 95.0 / 180.2 ms"


def test_a_target_missed_by_little_says_by_how_much():
    assert verdict(40.0, "<=", 40) == "met"
    assert verdict(41.0, "<=", 40) == "missed: 1.02x the bound"  # not "1.0x"
    assert verdict(88.0, "<=", 40) == "missed: 2.2x the bound"
    assert verdict(126.1, ">=", 150) == "missed: 84 % of the bound"
