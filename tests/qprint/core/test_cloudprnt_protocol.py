"""CloudPRNT's wire, as the pure protocol module reads and writes it."""

import json

import pytest

from qprint.core import cloudprnt_protocol as protocol


@pytest.mark.parametrize(
    ("code", "state", "reasons", "ok"),
    [
        ("200 OK", "idle", (), True),
        ("200%20OK", "idle", (), True),
        ("211 Paper low", "idle", ("media-low",), True),
        ("410 Out of paper", "stopped", ("media-empty",), False),
        ("411%20Paper%20jam", "stopped", ("media-jam",), False),
        ("420 Cover open", "stopped", ("cover-open",), False),
        ("510 Media error", "idle", ("document-format-error",), False),
        ("499 Something new", "stopped", ("other-error",), False),
        ("", "idle", (), True),
    ],
)
def test_status_codes_are_printer_states(code, state, reasons, ok):
    status = protocol.printer_status(code)
    assert (status.state, status.reasons, status.ok) == (state, reasons, ok)


def test_an_unlisted_code_keeps_what_the_printer_said():
    assert protocol.printer_status("431 Some new trouble").text == "431 Some new trouble"
    assert protocol.printer_status("410 whatever").text == "410 Out of paper"


def test_printing_in_progress_is_processing():
    assert protocol.printer_status("200 OK", printing=True).state == "processing"
    assert protocol.printer_status("410 Out of paper", printing=True).state == "stopped"


@pytest.mark.parametrize(
    ("code", "printed"),
    [("200 OK", True), ("200", True), ("OK", True), ("211", True), ("410", False), ("520", False)],
)
def test_a_confirmation_code_is_printed_or_failed(code, printed):
    assert protocol.confirmation(code).printed is printed


@pytest.mark.parametrize(
    ("mac", "normal"),
    [
        ("00:11:62:0A:0B:0C", "00:11:62:0a:0b:0c"),
        ("00-11-62-0a-0b-0c", "00:11:62:0a:0b:0c"),
        ("0011620a0b0c", "00:11:62:0a:0b:0c"),
        ("00%3A11%3A62%3A0a%3A0b%3A0c", "00:11:62:0a:0b:0c"),
    ],
)
def test_macs_have_one_spelling(mac, normal):
    assert protocol.normalize_mac(mac) == normal


@pytest.mark.parametrize("mac", ["", None, 7, "00:11", "zz:11:62:0a:0b:0c", "x" * 100])
def test_a_bad_mac_is_refused(mac):
    with pytest.raises(protocol.ProtocolError):
        protocol.normalize_mac(mac)


def test_a_poll_reports_what_the_printer_says_of_itself():
    poll = protocol.parse_poll(
        json.dumps(
            {
                "printerMAC": "00:11:62:00:00:01",
                "statusCode": "200%20OK",
                "printingInProgress": False,
                "clientAction": [
                    {"request": "ClientType", "result": "Star TSP100IV"},
                    {"request": "ClientVersion", "result": "2.0"},
                    {"request": "Encodings", "result": "image/png; text/plain"},
                    {"request": "GetPollInterval", "result": "10"},
                    {"request": "SomethingElse", "result": "ignored"},
                ],
                "barcodeReader": [],
            }
        ).encode()
    )
    assert poll.mac == "00:11:62:00:00:01"
    assert poll.about_itself() == {
        "model": "Star TSP100IV",
        "firmware": "2.0",
        "encodings": ["image/png", "text/plain"],
        "poll_interval": 10,
    }


def test_answers():
    assert protocol.poll_answer() == {"jobReady": False}
    asked = protocol.poll_answer(ask=True)
    assert [a["request"] for a in asked["clientAction"]] == list(protocol.CLIENT_ACTIONS)
    ready = protocol.poll_answer(job_token="t", media_types=("image/png",), ask=True)
    assert ready == {
        "jobReady": True,
        "mediaTypes": ["image/png"],
        "jobToken": "t",
        "deleteMethod": "DELETE",
    }


def test_job_headers_from_options():
    assert protocol.job_headers({}) == {}
    assert protocol.job_headers({"cut": "full", "buzzer_start": 1, "buzzer_end": 3}) == {
        "X-Star-Cut": "full; feed=true",
        "X-Star-Buzzerstartpattern": "1",
        "X-Star-Buzzerendpattern": "3",
    }
    assert protocol.job_headers({"cut": "none", "feed": False}) == {
        "X-Star-Cut": "none; feed=false"
    }
