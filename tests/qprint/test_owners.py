"""Each guarded table has one writer, and each shared predicate is written once.

Read from the source of every module of qprint (migrations aside), so a new path that writes a
job event or a document row itself, or restates "the job a device holds" or "a pending command"
instead of asking the models' predicate, fails here whatever runs it:

- ``qprint_job_event`` is written by ``qprint/domain/events.py`` only (device events, server
  events, and the ``INSERT`` it writes for the claim's and the submission's one statement);
- ``qprint_document`` is written by ``qprint/documents/storage.py`` only;
- the held job (CLAIMED) and the pending command (PENDING) are read through
  ``PrintJobQuerySet.held()`` / ``DeviceCommandQuerySet.pending()`` and their SQL copies in
  ``qprint/models/raw.py``.

Each scan is first shown to find what it looks for (a planted writer, and the owner itself).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "qprint"

#: table -> (owner module, model class, the reverse accessor from a job)
TABLES = {
    "qprint_job_event": ("qprint/domain/events.py", "PrintJobEvent", "events"),
    "qprint_document": ("qprint/documents/storage.py", "PrintDocument", "document"),
}
WRITE_METHODS = {
    "create",
    "bulk_create",
    "update",
    "bulk_update",
    "update_or_create",
    "get_or_create",
    "delete",
    "save",
    "raw",
}
#: Where the held-job and pending-command predicates may be written: the predicates themselves and
#: the schema's constraints and indexes.
PREDICATE_HOMES = {
    "qprint/models/querysets.py",
    "qprint/models/raw.py",
    "qprint/models/jobs.py",
    "qprint/models/commands.py",
}
PREDICATE_STATUSES = {"CLAIMED", "PENDING"}


def _modules() -> list[tuple[str, str]]:
    root = PACKAGE.parent
    return [
        (str(path.relative_to(root)), path.read_text())
        for path in sorted(PACKAGE.rglob("*.py"))
        if "migrations" not in path.parts and "agent" not in path.parts
    ]


def _strings(tree: ast.AST) -> list[str]:
    return [
        n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
    ]


def _chain(node: ast.AST) -> list[str]:
    """``A.b.c(...).d`` -> ["A", "b", "c", "d"] (calls looked through)."""
    names: list[str] = []
    while True:
        if isinstance(node, ast.Call):
            node = node.func
        elif isinstance(node, ast.Attribute):
            names.append(node.attr)
            node = node.value
        elif isinstance(node, ast.Name):
            names.append(node.id)
            return names[::-1]
        else:
            return names[::-1]


def _string_lines(tree: ast.AST, pattern: re.Pattern) -> set[int]:
    return {
        n.lineno
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and pattern.search(n.value)
    }


def table_writes(source: str, table: str) -> set[int]:
    """The lines of ``source`` that write ``table``: SQL text, the model's constructor or manager
    writes, a job's reverse accessor's writes, or the table name read off the model."""
    _, model, accessor = TABLES[table]
    tree = ast.parse(source)
    sql_write = re.compile(rf"\b(INSERT\s+INTO|UPDATE|DELETE\s+FROM)\s+\"?{table}\b", re.I)
    lines = _string_lines(tree, sql_write)
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            chain = _chain(node.func)
            constructed = chain == [model]
            managed = bool(chain) and chain[0] == model and bool(WRITE_METHODS & set(chain[1:]))
            related = len(chain) >= 3 and chain[-2] == accessor and chain[-1] in WRITE_METHODS
            if constructed or managed or related:
                lines.add(node.lineno)
        elif isinstance(node, ast.Attribute) and _chain(node) == [model, "_meta", "db_table"]:
            lines.add(node.lineno)
    return lines


def predicate_restatements(source: str) -> set[int]:
    """The lines of ``source`` whose filters or SQL restate the held-job or pending-command
    predicate."""
    tree = ast.parse(source)
    lines = _string_lines(tree, re.compile(r"status\s*=\s*'(CLAIMED|PENDING)'"))
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        chain = _chain(node.func)
        if not chain or chain[-1] not in {"filter", "exclude", "Q", "get", "exists"}:
            continue
        for keyword in node.keywords:
            value = keyword.value
            if isinstance(value, ast.Attribute):
                # JobStatus.CLAIMED, CommandStatus.PENDING; another table's own status enum (an
                # enrolment's PENDING) is another predicate.
                owner = _chain(value.value)
                if owner and owner[-1] not in {"JobStatus", "CommandStatus"}:
                    continue
                status = value.attr
            elif isinstance(value, ast.Constant):
                status = value.value
            else:
                continue
            if keyword.arg == "status" and status in PREDICATE_STATUSES:
                lines.add(node.lineno)
    return lines


PLANTED = """
from django.db import connection
from qprint.models import PrintDocument, PrintJob, PrintJobEvent

def sneaky(job):
    PrintJobEvent.objects.create(job=job, type="PRINTED")
    PrintJobEvent(job=job).save()
    job.events.create(type="PRINTED")
    PrintDocument.objects.filter(job=job).update(content=b"")
    with connection.cursor() as cursor:
        cursor.execute("INSERT INTO qprint_job_event (event_id) VALUES (%s)", [1])
        cursor.execute(f"UPDATE qprint_document SET content = %s")
    held = PrintJob.objects.filter(device=job.device, status="CLAIMED")
    cursor.execute("SELECT 1 FROM qprint_device_command c WHERE c.status = 'PENDING'")
    return held
"""


def test_the_scans_find_a_planted_writer_and_a_restated_predicate():
    assert table_writes(PLANTED, "qprint_job_event") == {6, 7, 8, 11}
    assert table_writes(PLANTED, "qprint_document") == {9, 12}
    assert predicate_restatements(PLANTED) == {13, 14}


@pytest.mark.parametrize("table", sorted(TABLES))
def test_one_module_writes_the_table(table):
    owner = TABLES[table][0]
    writers = {path: found for path, source in _modules() if (found := table_writes(source, table))}
    assert owner in writers, f"the scan no longer sees {owner} write {table}"
    assert set(writers) == {owner}, {p: f for p, f in writers.items() if p != owner}


def test_the_held_job_and_the_pending_command_are_asked_of_the_models():
    restated = {
        path: found
        for path, source in _modules()
        if path not in PREDICATE_HOMES and (found := predicate_restatements(source))
    }
    assert restated == {}
