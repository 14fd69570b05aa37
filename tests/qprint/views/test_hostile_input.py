"""Hostile input over HTTP: every string and JSON value that could reach the database is refused
at the boundary (``qprint.core.inputs``) with 422 and its own code, naming the field, and
nothing already accepted changes. Never a 500 or a 503 (docs/SECURITY.md, "Limits")."""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from django.core import checks
from django.test import Client, override_settings
from django.urls import reverse

from qprint import api
from qprint.models import Device, DeviceCommand, DevicePrinter, PrintJob, PrintJobEvent
from tests.qprint.factories import DeviceWithToken, KeyWithSecret, connect, make_device, make_key

pytestmark = pytest.mark.django_db

PDF = b"%PDF-1.4\n%%EOF\n"
NUL = "\u0000"
SURROGATE = "\ud800"


def deep(levels: int) -> str:
    """JSON text of ``levels`` nested arrays (built as text: Python's encoder would recurse)."""
    return "[" * levels + "]" * levels


@dataclass
class World:
    client: Client
    key: KeyWithSecret
    dev: DeviceWithToken
    assignment: dict
    command: DeviceCommand

    def send(self, method: str, url: str, body: str, auth) -> Any:
        return getattr(self.client, method)(url, body, content_type="application/json", **auth.auth)

    def snapshot(self) -> dict:
        """What a refused request must leave as it was."""
        device = Device.objects.get(pk=self.dev.device.pk)
        return {
            "settings": (device.settings_revision, device.settings),
            "printers": sorted(DevicePrinter.objects.values_list("name", "status")),
            "jobs": sorted(PrintJob.objects.values_list("id", "status", "title")),
            "events": PrintJobEvent.objects.count(),
            "commands": sorted(DeviceCommand.objects.values_list("id", "status", "type")),
        }


@pytest.fixture
def world(client) -> World:
    key = make_key()
    dev = make_device()
    connect(dev.device)
    api.replace_printers(dev.device, [{"name": "laser", "status": "idle"}])
    client.post(
        reverse("qprint:jobs"),
        {
            "device": "front-desk",
            "content_type": "application/pdf",
            "content_base64": base64.b64encode(PDF).decode(),
        },
        content_type="application/json",
        **key.auth,
    )
    assignment = client.post(reverse("qprint:device-claim"), **dev.auth).json()
    command = api.send_command(dev.device, "PING")
    return World(client, key, dev, assignment, command)


def raw(value: Any) -> str:
    """A JSON text with ``value`` in it, escapes kept (``\\u0000``, ``\\ud800``)."""
    return json.dumps(value)


def submission(**fields) -> dict:
    return {
        "device": "front-desk",
        "content_type": "application/pdf",
        "content_base64": base64.b64encode(PDF).decode(),
        **fields,
    }


def event(w: World, **fields) -> dict:
    return {
        "event_id": str(uuid.uuid4()),
        "type": "RECEIVED",
        "claim_id": w.assignment["claim_id"],
        "occurred_at": "2026-01-01T10:00:00Z",
        **fields,
    }


def settings_call(body: str) -> Callable[[World], Any]:
    return lambda w: w.send(
        "put", reverse("qprint:device-settings", args=["front-desk"]), body, w.key
    )


def submit_call(body: str) -> Callable[[World], Any]:
    return lambda w: w.send("post", reverse("qprint:jobs"), body, w.key)


def printers_call(body: str) -> Callable[[World], Any]:
    return lambda w: w.send("put", reverse("qprint:device-printers"), body, w.dev)


def event_call(make: Callable[[World], str]) -> Callable[[World], Any]:
    return lambda w: w.send(
        "post", reverse("qprint:device-job-events", args=[w.assignment["job_id"]]), make(w), w.dev
    )


def command_call(body: str) -> Callable[[World], Any]:
    return lambda w: w.send(
        "post", reverse("qprint:device-commands", args=["front-desk"]), body, w.key
    )


def result_call(body: str) -> Callable[[World], Any]:
    return lambda w: w.send(
        "post", reverse("qprint:device-command-result", args=[w.command.pk]), body, w.dev
    )


def nested_in(prefix: str, levels: int, suffix: str) -> str:
    return prefix + deep(levels) + suffix


SUB_PREFIX = raw(submission())[:-1]  # the submission without its closing brace

CASES: list[tuple[str, Callable[[World], Any], str, str]] = [
    # settings (PUT devices/<name>/settings)
    ("settings value NUL", settings_call(raw({"a": NUL})), "invalid_text", "settings"),
    ("settings value surrogate", settings_call(raw({"a": SURROGATE})), "invalid_text", "settings"),
    ("settings key NUL", settings_call(raw({NUL: 1})), "invalid_text", "settings"),
    ("settings key surrogate", settings_call(raw({SURROGATE: 1})), "invalid_text", "settings"),
    ("settings nested deep", settings_call(nested_in('{"a":', 100, "}")), "too_deep", "body"),
    ("settings 100k deep", settings_call(nested_in('{"a":', 100_000, "}")), "too_deep", "body"),
    ("settings NaN", settings_call('{"a": NaN}'), "invalid", "body"),
    # submission (POST jobs)
    ("title NUL", submit_call(raw(submission(title=NUL))), "invalid_text", "title"),
    ("title surrogate", submit_call(raw(submission(title=SURROGATE))), "invalid_text", "title"),
    ("printer NUL", submit_call(raw(submission(printer=NUL))), "invalid_text", "printer"),
    ("device NUL", submit_call(raw(submission(device=NUL))), "invalid_text", "device"),
    (
        "options value NUL",
        submit_call(raw(submission(options={"a": NUL}))),
        "invalid_text",
        "options",
    ),
    (
        "options key surrogate",
        submit_call(raw(submission(options={SURROGATE: 1}))),
        "invalid_text",
        "options",
    ),
    (
        "options 100k deep",
        submit_call(SUB_PREFIX + ', "options": {"a": ' + deep(100_000) + "}}"),
        "too_deep",
        "body",
    ),
    (
        "options 40 deep",
        submit_call(SUB_PREFIX + ', "options": {"a": ' + deep(40) + "}}"),
        "too_deep",
        "body",
    ),
    (
        "content_type NUL",
        submit_call(raw(submission(content_type="application/pdf" + NUL))),
        "invalid_text",
        "content_type",
    ),
    # numbers and shapes no job can have (a Python error, never a 500)
    *(
        (f"expires_in {value!r}", submit_call(raw(submission(expires_in=value))), "invalid", f)
        for value, f in ((10**14, "expires_in"), (1e20, "expires_in"), (2**63, "expires_in"))
    ),
    *(
        (
            f"options {label}",
            submit_call(raw(submission(options=options))),
            "unsupported_option",
            field,
        )
        for label, options, field in (
            ("duplex list", {"duplex": [1]}, "duplex"),
            ("duplex object", {"duplex": {}}, "duplex"),
            ("sides list", {"sides": [1]}, "sides"),
            ("orientation list", {"orientation": [1]}, "orientation"),
            ("color object", {"color": {"a": 1}}, "color"),
            ("fit list", {"fit": [1]}, "fit"),
            ("page range of 5000 digits", {"page_ranges": "9" * 5000}, "page_ranges"),
            ("page range to 5000 digits", {"page_ranges": "1-" + "9" * 5000}, "page_ranges"),
        )
    ),
    # printers (PUT device/printers)
    ("printer name NUL", printers_call(raw([{"name": NUL}])), "invalid_text", "printers[0].name"),
    (
        "printer status surrogate",
        printers_call(raw([{"name": "a", "status": SURROGATE}])),
        "invalid_text",
        "printers[0].status",
    ),
    (
        "printer capabilities key NUL",
        printers_call(raw({"printers": [{"name": "a", "capabilities": {NUL: 1}}]})),
        "invalid_text",
        "printers[0].capabilities",
    ),
    ("printers 100k deep", printers_call(deep(100_000)), "too_deep", "body"),
    ("printers not objects", printers_call(raw(["a"])), "invalid", "printers[0]"),
    # events (POST device/jobs/<id>/events)
    ("event type object", event_call(lambda w: raw(event(w, type={}))), "invalid", "type"),
    ("event type list", event_call(lambda w: raw(event(w, type=[]))), "invalid", "type"),
    ("event id object", event_call(lambda w: raw(event(w, event_id={}))), "invalid", "event_id"),
    (
        "event message NUL",
        event_call(lambda w: raw(event(w, message=NUL))),
        "invalid_text",
        "message",
    ),
    (
        "event detail surrogate",
        event_call(lambda w: raw(event(w, detail={"x": [SURROGATE]}))),
        "invalid_text",
        "detail",
    ),
    (
        "event detail key NUL",
        event_call(lambda w: raw(event(w, detail={NUL: 1}))),
        "invalid_text",
        "detail",
    ),
    *(
        (
            f"event occurred_at {when}",
            event_call(lambda w, when=when: raw(event(w, occurred_at=when))),
            "invalid",
            "occurred_at",
        )
        for when in ("0001-01-01T00:00:00+14:00", "9999-12-31T23:59:59-14:00")
    ),
    (
        "event detail 100k deep",
        event_call(lambda w: raw(event(w))[:-1] + ', "detail": {"a": ' + deep(100_000) + "}}"),
        "too_deep",
        "body",
    ),
    # commands (POST devices/<name>/commands) and their results
    ("command type NUL", command_call(raw({"type": NUL})), "invalid_text", "type"),
    ("command type empty", command_call(raw({"type": ""})), "invalid", "type"),
    (
        "command payload surrogate",
        command_call(raw({"type": "PING", "payload": {"a": SURROGATE}})),
        "invalid_text",
        "payload",
    ),
    (
        "command payload key NUL",
        command_call(raw({"type": "PING", "payload": {NUL: 1}})),
        "invalid_text",
        "payload",
    ),
    (
        "command result NUL",
        result_call(raw({"status": "DONE", "result": NUL})),
        "invalid_text",
        "result",
    ),
    (
        "command result key surrogate",
        result_call(raw({"status": "DONE", "result": {SURROGATE: 1}})),
        "invalid_text",
        "result",
    ),
    ("command status object", result_call(raw({"status": {}})), "invalid", "status"),
]


@pytest.mark.parametrize(("label", "call", "code", "field"), CASES, ids=[c[0] for c in CASES])
def test_hostile_value_is_refused_with_its_code_naming_the_field_and_changes_nothing(
    world, label, call, code, field
):
    before = world.snapshot()
    answer = call(world)
    assert answer.status_code == 422, (label, answer.content)
    body = answer.json()
    assert body["error"] == code, body
    assert f"'{field}'" in body["message"], body
    assert world.snapshot() == before


LIMIT_CASES = [
    (
        {"MAX_SETTINGS_BYTES": 100},
        settings_call(raw({"a": "x" * 200})),
        "too_long",
        "settings",
    ),
    ({"MAX_JSON_ITEMS": 3}, settings_call(raw({str(i): i for i in range(4)})), "too_many", "body"),
    ({"MAX_JSON_DEPTH": 3}, settings_call(raw({"a": {"b": {"c": 1}}})), "too_deep", "body"),
    (
        {"MAX_PRINTERS": 2},
        printers_call(raw([{"name": n} for n in "abc"])),
        "too_many",
        "printers",
    ),
    (
        {"MAX_DETAIL_BYTES": 50},
        event_call(lambda w: raw(event(w, detail={"a": "x" * 100}))),
        "too_long",
        "detail",
    ),
    (
        {"MAX_MESSAGE_LENGTH": 5},
        event_call(lambda w: raw(event(w, message="x" * 6))),
        "too_long",
        "message",
    ),
    (
        {"MAX_DETAIL_BYTES": 50},
        submit_call(raw(submission(options={"a": "x" * 100}))),
        "too_long",
        "options",
    ),
    (
        {"MAX_DETAIL_BYTES": 50},
        result_call(raw({"status": "DONE", "result": ["x" * 100]})),
        "too_long",
        "result",
    ),
]


@pytest.mark.parametrize(
    ("limits", "call", "code", "field"), LIMIT_CASES, ids=[f"{c[2]}-{c[3]}" for c in LIMIT_CASES]
)
def test_each_limit_is_configurable_and_refused_with_its_own_code(world, limits, call, code, field):
    before = world.snapshot()
    with override_settings(QPRINT=limits):
        answer = call(world)
    assert answer.status_code == 422, answer.content
    assert answer.json()["error"] == code
    assert f"'{field}'" in answer.json()["message"]
    assert world.snapshot() == before


def test_a_device_name_no_row_can_have_is_answered_as_unknown(world):
    for quoted in ("%00", "a%00b", "%ED%A0%80", "x" * 1000):
        for suffix in ("", "/pause", "/settings"):
            url = f"/qprint/api/v1/devices/{quoted}{suffix}"
            if suffix:
                method = "put" if suffix == "/settings" else "post"
                answer = world.send(method, url, "{}", world.key)
            else:
                answer = world.client.get(url, **world.key.auth)
            assert answer.status_code == 404, (quoted, suffix, answer.content)
            assert answer.json()["error"] == "unknown_device"
    listed = world.client.get(reverse("qprint:jobs") + "?device=%00", **world.key.auth)
    assert listed.status_code == 200
    assert listed.json()["results"] == []
    cursor = base64.urlsafe_b64encode(deep(100_000).encode()).decode()
    paged = world.client.get(reverse("qprint:jobs") + f"?cursor={cursor}", **world.key.auth)
    assert paged.status_code == 422


def test_a_value_the_database_refuses_is_422_not_an_outage(world, monkeypatch):
    """A DataError is the client's data refused (422); an OperationalError is an outage (503,
    tests/qprint/views/test_http_errors.py)."""
    from django.db import DataError

    from qprint.domain import devices

    def refused(device, values):
        raise DataError("value out of range")

    monkeypatch.setattr(devices, "update_settings", refused)
    answer = settings_call(raw({"a": 1}))(world)
    assert answer.status_code == 422
    assert answer.json()["error"] == "invalid"


def test_host_code_meets_the_same_boundary(world):
    """``qprint.api`` is the same domain: a NUL from host code is refused before the database."""
    from qprint.core.errors import Invalid

    for call in (
        lambda: api.update_settings(world.dev.device, {"a": NUL}),
        lambda: api.submit_job("acme", "front-desk", PDF, "application/pdf", title=SURROGATE),
        lambda: api.replace_printers(world.dev.device, [{"name": NUL}]),
        lambda: api.send_command(world.dev.device, "PING", {"a": float("nan")}),
        lambda: api.create_device("acme", "desk" + NUL),
        lambda: api.create_device("acme", "shop/desk"),  # a name is one segment of its URLs
        lambda: api.create_device("acme", "desk\nsecond line"),  # and a field of log lines
    ):
        with pytest.raises(Invalid):
            call()


@pytest.mark.parametrize("name", ["MAX_JSON_DEPTH", "MAX_PRINTERS", "AUTH_FAILURE_LIMIT"])
def test_a_limit_that_is_not_a_positive_integer_is_named_by_the_check(name):
    with override_settings(QPRINT={name: 0}):
        ids = {m.id for m in checks.run_checks()}
    assert "qprint.E009" in ids


def test_a_json_depth_above_what_the_parser_can_take_is_named_by_the_check():
    with override_settings(QPRINT={"MAX_JSON_DEPTH": 5000}):
        ids = {m.id for m in checks.run_checks()}
    assert "qprint.E010" in ids


def test_a_json_integer_written_with_a_fraction_of_zero_is_an_integer(world):
    """JSON does not tell 3 from 3.0 (nor does docs/openapi.yaml's ``integer``)."""
    made = submit_call(raw(submission(priority=3.0, expires_in=60.0)))(world)
    assert made.status_code == 201, made.content
    assert made.json()["priority"] == 3
    refused = submit_call(raw(submission(priority=2.5)))(world)
    assert refused.status_code == 422
    assert "'priority'" in refused.json()["message"]


def test_an_empty_query_parameter_is_refused_not_read_as_absent(world):
    """``?limit=`` and ``?status=`` are not the defaults: docs/openapi.yaml gives their shape."""
    for query in ("?limit=", "?status=", "?cursor="):
        answer = world.client.get(reverse("qprint:jobs") + query, **world.key.auth)
        assert answer.status_code == 422, query
        assert answer.json()["error"] == "invalid"


@pytest.mark.parametrize(
    ("capabilities", "options"),
    [
        ({"document_formats": [1]}, {}),
        ({"sides": [1, None]}, {"sides": "two-sided-long-edge"}),
        ({"media": [None, {}]}, {"media": "iso_a4_210x297mm"}),
        ({"orientations": [{}]}, {"orientation": "landscape"}),
    ],
)
def test_capabilities_of_any_shape_never_break_a_submission(world, capabilities, options):
    """A device's printers report their capabilities as any JSON object: entries that are no
    names make a submission asking for that option a clear refusal, never a server error."""
    api.replace_printers(
        world.dev.device, [{"name": "laser", "is_default": True, "capabilities": capabilities}]
    )
    answer = submit_call(raw(submission(options=options)))(world)
    assert answer.status_code == 422, answer.content
    assert answer.json()["error"] == "unsupported_option"


def test_a_content_length_of_a_digit_that_is_no_number_is_not_a_small_body(world):
    """``Content-Length: ²`` is a digit to Python's ``isdigit`` but no number: the key is looked
    up the usual way and the request answered, never a server error."""
    answer = world.client.post(
        reverse("qprint:jobs"),
        raw(submission()),
        content_type="application/json",
        CONTENT_LENGTH="\u00b2",
        **world.key.auth,
    )
    assert answer.status_code < 500, answer.content
