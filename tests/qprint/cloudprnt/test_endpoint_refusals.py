"""What the CloudPRNT endpoint refuses, in-process: wrong or foreign credentials (challenged,
throttled), hostile polls, other methods, malformed tokens, unknown kinds; and the ``create``
command's output."""

import base64
import json
import uuid

import pytest
from django.core.management import call_command
from django.test import override_settings
from django.urls import reverse

from qprint import api
from qprint.models import Device, DevicePrinter
from tests.qprint.cloudprnt.endpoint import job_of, submit
from tests.qprint.cloudprnt.simulator import StarPrinter, over_test_client
from tests.qprint.factories import make_device, make_key

pytestmark = pytest.mark.django_db


def test_wrong_credentials_are_401_with_a_basic_challenge(printer, client, url):
    wrong = StarPrinter(printer.send, printer.name, "not-the-token")
    reply = wrong.poll_raw()
    assert reply.status == 401
    assert reply.headers["WWW-Authenticate"].startswith("Basic")
    assert reply.json()["error"] == "unauthorized"
    assert client.post(url, b"{}", content_type="application/json").status_code == 401
    bearer = client.post(
        url, b"{}", content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {printer.token}"
    )
    assert bearer.status_code == 401
    wrong_name = StarPrinter(printer.send, "someone-else", printer.token)
    assert wrong_name.poll_raw().status == 401
    garbled = client.post(
        url, b"{}", content_type="application/json", HTTP_AUTHORIZATION="Basic %%%"
    )
    assert garbled.status_code == 401
    assert not Device.objects.get(name="counter").printer_mac  # nothing changed


def test_an_agent_token_does_not_poll_and_a_printer_token_does_not_claim(client, url, made):
    agent = make_device("acme", "desk")
    as_printer = StarPrinter(over_test_client(client, url), "desk", agent.token)
    assert as_printer.poll_raw().status == 401
    _, token = made
    claim = client.post(reverse("qprint:device-claim"), HTTP_AUTHORIZATION=f"Bearer {token}")
    assert claim.status_code == 401


def test_failed_authentications_are_throttled(client, url, printer):
    with override_settings(QPRINT={"AUTH_FAILURE_LIMIT": 3}):
        for n in range(3):
            assert StarPrinter(printer.send, printer.name, f"guess-{n}").poll_raw().status == 401
        throttled = StarPrinter(printer.send, printer.name, "guess-again").poll_raw()
        assert throttled.status == 429
        assert "Retry-After" in throttled.headers


@pytest.mark.parametrize(
    ("body", "status", "error"),
    [
        (b"not json", 400, "invalid_poll"),
        (b"[1, 2]", 400, "invalid_poll"),
        (b'{"statusCode": "200 OK"}', 400, "invalid_poll"),
        (b'{"printerMAC": "nonsense"}', 400, "invalid_poll"),
        (b'{"printerMAC": "00:11:62:00:00:01", "clientAction": 7}', 400, "invalid_poll"),
        (b'{"printerMAC": "00:11:62:00:00:01", "printingInProgress": "yes"}', 400, "invalid_poll"),
        (b"\xff\xfe", 400, "invalid_poll"),
        # Text the database cannot hold, as the printer sends it or URL-encoded: refused before
        # the poll binds the MAC or takes the connection.
        (b'{"printerMAC": "00:11:62:00:00:01", "statusCode": "299%20%00x"}', 400, "invalid_poll"),
        (b'{"printerMAC": "00:11:62:00:00:01", "statusCode": "299 \\u0000"}', 400, "invalid_poll"),
        (b'{"printerMAC": "00:11:62:00:00:01", "statusCode": "299 \\ud800"}', 400, "invalid_poll"),
        (
            b'{"printerMAC": "00:11:62:00:00:01", '
            b'"clientAction": [{"request": "ClientType", "result": "x\\u0000"}]}',
            400,
            "invalid_poll",
        ),
        (b"{" + b'"x": "' + b"a" * 20000 + b'"}', 413, "request_too_large"),
    ],
)
def test_hostile_polls_get_clear_errors_and_change_nothing(printer, body, status, error):
    job = submit()
    reply = printer.send("POST", {}, body, {**printer.headers, "Content-Type": "application/json"})
    assert reply.status == status
    assert reply.json()["error"] == error
    assert job_of(job).status == "QUEUED"
    device = Device.objects.get(name="counter")
    assert device.printer_mac == "" and device.connection_id is None


@pytest.mark.parametrize("interval", ["\u00b2", "\u2460", "5\u00b9", "0", "99999", "soon"])
def test_a_poll_interval_that_is_no_number_of_seconds_is_left_out(printer, made, interval):
    """``GetPollInterval`` answered with what is no whole number of seconds from 1 to 3600
    (a Unicode digit such as "²" included) is not kept; the poll is answered as any other."""
    device, _ = made
    body = {
        "printerMAC": printer.mac,
        "clientAction": [
            {"request": "GetPollInterval", "result": interval},
            {"request": "ClientType", "result": "Star mC-Print3"},
        ],
    }
    reply = printer.send(
        "POST",
        {},
        json.dumps(body).encode(),
        {**printer.headers, "Content-Type": "application/json"},
    )
    assert reply.status == 200, reply.body
    capabilities = DevicePrinter.objects.get(device=device).capabilities
    assert capabilities["model"] == "Star mC-Print3"
    assert "poll_interval" not in capabilities


def test_a_user_name_the_database_cannot_hold_is_401_and_counted(printer):
    """A NUL in the Basic user name names no device: 401 with the challenge, and a wrong token
    with it counts toward the throttle as any other (never the database's refusal)."""

    def basic(user: bytes, token: bytes) -> dict[str, str]:
        credential = base64.b64encode(user + b":" + token).decode()
        return {"Authorization": f"Basic {credential}", "Content-Type": "application/json"}

    poll = json.dumps({"printerMAC": printer.mac}).encode()
    with override_settings(QPRINT={"AUTH_FAILURE_LIMIT": 2}):
        right_token = printer.send("POST", {}, poll, basic(b"counter\x00", printer.token.encode()))
        wrong = [printer.send("POST", {}, poll, basic(b"counter\x00", b"wrong")) for _ in range(3)]
    assert right_token.status == 401
    assert right_token.headers["WWW-Authenticate"].startswith("Basic")
    assert [r.status for r in wrong] == [401, 401, 429]
    assert not Device.objects.get(name="counter").printer_mac


def test_other_methods_are_405(client, url):
    assert client.put(url).status_code == 405


def test_the_create_command_prints_the_printer_settings_and_the_token_last(capsys):
    call_command(
        "qprint_device",
        "create",
        "--tenant",
        "acme",
        "--name",
        "bar",
        "--kind",
        "cloudprnt",
        "--server",
        "https://print.example.com",
    )
    lines = capsys.readouterr().out.strip().splitlines()
    text = "\n".join(lines)
    assert "https://print.example.com/qprint/cloudprnt/" in text or "/cloudprnt/" in text
    assert "HTTP Basic" in text
    assert "User name:               bar" in text
    device = Device.objects.get(name="bar")
    assert device.kind == "cloudprnt"
    token = lines[-1]
    from qprint.domain import credentials

    assert credentials.hash_secret(token) == device.token_hash


def test_the_device_object_names_its_kind(client, made):
    key = make_key()
    response = client.get(reverse("qprint:device-detail", args=["counter"]), **key.auth)
    assert response.json()["kind"] == "cloudprnt"
    make_device("acme", "desk")
    listed = client.get(reverse("qprint:devices"), **key.auth).json()
    kinds = {d["name"]: d["kind"] for d in listed.get("devices", listed.get("results", []))}
    assert kinds == {"counter": "cloudprnt", "desk": "agent"}


def test_an_unknown_kind_is_refused():
    with pytest.raises(Exception) as refused:
        api.create_device("acme", "x", kind="carrier-pigeon")
    assert refused.value.code == "invalid"


def test_a_token_is_a_uuid_or_404(printer):
    submit()
    printer.poll()
    assert printer.fetch("not-a-uuid", "application/vnd.star.starprnt").status == 404
    assert printer.fetch(str(uuid.uuid4()), "application/vnd.star.starprnt").status == 404


def test_one_wrong_token_from_many_addresses_is_throttled_by_its_prefix(client, url, printer):
    wrong = base64.b64encode(f"counter:{printer.token[:10]}-guess".encode()).decode()
    statuses = []
    with override_settings(QPRINT={"AUTH_FAILURE_LIMIT": 5}):
        for n in range(8):
            response = client.post(
                url,
                b"{}",
                content_type="application/json",
                HTTP_AUTHORIZATION=f"Basic {wrong}",
                REMOTE_ADDR=f"192.0.2.{n + 1}",
            )
            statuses.append(response.status_code)
    assert statuses[:5] == [401] * 5
    assert set(statuses[5:]) == {429}
    assert not Device.objects.get(name="counter").printer_mac


def test_another_printer_gets_the_answer_for_a_job_that_does_not_exist(client, url, printer):
    job = submit()
    token = printer.poll()["jobToken"]
    _, other_token = api.create_device("other", "bar", kind="cloudprnt")
    other = StarPrinter(over_test_client(client, url), "bar", other_token, mac="00:11:62:99:99:99")
    other.poll()
    fetched = other.fetch(token, "application/vnd.star.starprnt")
    confirmed = other.confirm(token, "410 Out of paper")
    absent = other.fetch(str(uuid.uuid4()), "application/vnd.star.starprnt")
    assert (fetched.status, fetched.json()) == (absent.status, absent.json())
    assert confirmed.status == 404
    assert job_of(job).status == "CLAIMED"
    assert printer.fetch(token, "application/vnd.star.starprnt").status == 200
