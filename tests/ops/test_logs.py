"""Logs: ``event key=value`` lines by default, JSON lines by a setting, nothing per idle ping."""

from __future__ import annotations

import json
import logging
import subprocess

import pytest

from qprint.core.logs import JsonFormatter, KeyValueFormatter, fields_of
from tests.processes import manage


def record(message: str, *args, level=logging.INFO, exc_info=None) -> logging.LogRecord:
    return logging.LogRecord("qprint.events", level, __file__, 1, message, args, exc_info)


def test_key_value_line_is_the_event_line_after_time_level_and_logger():
    line = KeyValueFormatter().format(record("job_status job=%s to=%s", "j1", "PRINTED"))
    assert line.endswith(" INFO qprint.events job_status job=j1 to=PRINTED")


def test_a_value_holding_a_line_break_stays_on_the_events_line():
    """A client's text in a value cannot write a line that reads as another event; a
    traceback still follows on its own lines."""
    forged = "pc\n2026-01-01 00:00:00,000 INFO qprint.jobs job_status job=x to=PRINTED\r"
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        import sys

        text = KeyValueFormatter().format(
            record("enrolment_started hostname=%s", forged, exc_info=sys.exc_info())
        )
    first, *traceback = text.splitlines()
    assert first.endswith("enrolment_started hostname=pc\\n2026-01-01 00:00:00,000 INFO "
                          "qprint.jobs job_status job=x to=PRINTED\\r")  # fmt: skip
    assert traceback[0] == "Traceback (most recent call last):"


def test_json_line_carries_the_event_and_each_field():
    r = record(
        "wake_dropped tenant=%s device=%s cause=layer_error error=%r", "acme", 7, OSError("a b")
    )
    out = json.loads(JsonFormatter().format(r))
    assert out["event"] == "wake_dropped"
    assert out["tenant"] == "acme" and out["device"] == "7" and out["cause"] == "layer_error"
    assert out["error"] == "OSError('a b')"  # a value with spaces stays whole
    assert out["level"] == "INFO" and out["logger"] == "qprint.events"
    assert out["time"].endswith("+00:00")
    assert out["message"].startswith("wake_dropped tenant=acme")


def test_json_line_keeps_reserved_names_and_exceptions():
    try:
        raise ValueError("boom")
    except ValueError:
        import sys

        r = record("odd level=%s", "x", exc_info=sys.exc_info())
    out = json.loads(JsonFormatter().format(r))
    assert out["level"] == "INFO" and out["field_level"] == "x"
    assert "ValueError: boom" in out["exception"]
    assert fields_of("no fields here") == {"event": "no"}


@pytest.mark.parametrize(("log_format", "is_json"), [("", False), ("json", True)])
def test_example_project_selects_the_format_with_LOG_FORMAT(log_format, is_json, tmp_path):
    """``manage.py`` under the example project's settings logs in the format LOG_FORMAT names."""
    code = (
        "import logging; logging.getLogger('qprint.events').info('job_status job=%s to=%s', "
        "'j1', 'PRINTED')"
    )
    env = {
        "PATH": "/usr/bin:/bin",
        "DJANGO_SETTINGS_MODULE": "example_project.settings",
        "SECRET_KEY": "test-secret-key",
        "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}",
        "LOG_FORMAT": log_format,
    }
    result = subprocess.run(
        manage("shell", "-c", code), env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    line = result.stderr.strip().splitlines()[-1]
    if is_json:
        assert json.loads(line)["event"] == "job_status"
        assert json.loads(line)["to"] == "PRINTED"
    else:
        assert line.endswith("INFO qprint.events job_status job=j1 to=PRINTED")


def test_an_unknown_LOG_FORMAT_is_named(tmp_path):
    env = {
        "PATH": "/usr/bin:/bin",
        "DJANGO_SETTINGS_MODULE": "example_project.settings",
        "SECRET_KEY": "test-secret-key",
        "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}",
        "LOG_FORMAT": "yaml",
    }
    result = subprocess.run(manage("check"), env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert "LOG_FORMAT must be keyvalue or json, not 'yaml'" in result.stderr


def test_a_job_printed_logs_one_line_per_state_change(transactional_db, caplog):
    """QUEUED, CLAIMED, RECEIVED, PRINTED: one line each, and a replayed event adds none."""
    import uuid
    from datetime import UTC, datetime

    from qprint import api
    from qprint.domain import connection
    from qprint.domain.claim import claim_next_job
    from qprint.domain.events import record_device_event

    device, _ = api.create_device("acme", "desk-logs")
    connection_id = uuid.uuid4()
    taken = connection.take(device.pk, connection_id, "node-x", 20)
    connection.mark_ready(
        device.pk, connection_id, taken.control_revision, taken.settings_revision, 20
    )
    caplog.set_level(logging.INFO)
    job, _ = api.submit_job("acme", "desk-logs", b"%PDF-1.4", "application/pdf")
    assignment = claim_next_job(device.pk)
    assert claim_next_job(device.pk).claim_id == assignment.claim_id  # a replay: no change
    for status in ("RECEIVED", "PRINTED"):
        event = {
            "event_id": str(uuid.uuid4()),
            "type": status,
            "claim_id": str(assignment.claim_id),
            "occurred_at": datetime.now(UTC).isoformat(),
        }
        record_device_event(device, job.pk, event)
        record_device_event(device, job.pk, event)  # the same event again: no change
    lines = [r.getMessage() for r in caplog.records if str(job.pk) in r.getMessage()]
    assert [line.split(" ")[0] for line in lines] == [
        "job_queued",
        "job_claimed",
        "job_status",
        "job_status",
    ]
    assert "from=CLAIMED to=RECEIVED" in lines[2] and "from=RECEIVED to=PRINTED" in lines[3]
    # The device by the name people know it by, as the agent's logs name it.
    assert all(" device=acme/desk-logs " in line for line in lines), lines
