"""``enroll``'s files, without a server (docs/AGENT.md, "Enrolling by code"): the token file
(mode 0600 from its first byte), ``agent.toml`` written or completed (an existing config keeps
its settings, printers and comments; a ``token_file`` it names is used), and the printers found
here: CUPS queues from ``lpstat``, IPP printers from ``ippfind`` only when they answer."""

from __future__ import annotations

import io
import os
import stat
import tomllib

import httpx
import pytest

from qprint.agent import enrol
from qprint.agent.config import read_toml
from qprint.agent.enrol import complete_config, write_secret
from qprint.agent.printers import PrinterSpec

URL = "https://print.example.com/qprint/"


def test_the_token_file_is_private_from_its_first_byte(tmp_path):
    path = tmp_path / "etc" / "device.token"
    write_secret(path, "s3cret")
    assert path.read_text() == "s3cret\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    write_secret(path, "n3w")  # re-enrolled: replaced whole
    assert path.read_text() == "n3w\n" and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert os.listdir(path.parent) == ["device.token"]


def test_a_new_config_names_the_server_the_token_file_and_the_printers_found(tmp_path):
    config = tmp_path / "agent.toml"
    found = [
        PrinterSpec("Office", "cups:Office", default=True),
        PrinterSpec("lobby", "ipp://10.0.0.7/ipp/print"),
    ]
    token = complete_config(config, URL, found, device="shop-7")
    assert token == tmp_path.resolve() / "device.token"
    settings = read_toml(config)
    assert settings["urls"] == [URL]
    assert settings["tokens_file"] == str(token)
    assert settings["name"] == "shop-7"
    assert [(p.name, p.uri, p.default) for p in settings["printers"]] == [
        ("Office", "cups:Office", True),
        ("lobby", "ipp://10.0.0.7/ipp/print", False),
    ]


def test_an_existing_config_keeps_what_it_says_and_gains_only_what_it_lacks(tmp_path):
    config = tmp_path / "agent.toml"
    original = (
        "# the shop's agent\n"
        'urls = ["https://a/qprint/", "https://b/qprint/"]\n'
        f'token_file = "{tmp_path / "secrets" / "device.token"}"\n'
        "printers_poll = 30\n\n"
        '[[printers]]\nname = "labels"\nuri = "socket://10.0.0.9"\ndefault = true\n'
    )
    config.write_text(original)
    found = [
        PrinterSpec("labels-again", "socket://10.0.0.9"),  # the same printer: not twice
        PrinterSpec("Office", "cups:Office", default=True),  # the config has its default
    ]
    token = complete_config(config, URL, found, device="shop-7")
    assert token == tmp_path / "secrets" / "device.token"  # the file the config names
    text = config.read_text()
    assert original.strip() in text  # comments and settings kept as written
    data = tomllib.loads(text)
    assert data["urls"] == ["https://a/qprint/", "https://b/qprint/"]
    assert "url" not in data and data["name"] == "shop-7"
    assert [(p["name"], p.get("default", False)) for p in data["printers"]] == [
        ("labels", True),
        ("Office", False),
    ]
    complete_config(config, URL, found, device="shop-7")  # a second enrolment adds nothing
    assert config.read_text() == text


def fake_tool(bin_dir, name: str, script: str) -> None:
    path = bin_dir / name
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(0o755)


def test_printers_found_are_the_cups_queues_and_the_ipp_printers_that_answer(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake_tool(
        bin_dir,
        "lpstat",
        'case "$1" in\n'
        '  -d) echo "system default destination: Office";;\n'
        '  -p) echo "printer Office is idle.  enabled since now"\n'
        '      echo "printer Labels disabled since now -"\n;;\n'
        "esac\n",
    )
    # Two announced: one answers, one does not (switched off); and this machine's own CUPS.
    fake_tool(
        bin_dir,
        "ippfind",
        "echo ipp://lobby.local:631/ipp/print\necho ipp://gone.local:631/ipp/print\n"
        "echo ipp://localhost:631/printers/Office\n",
    )
    fake_tool(bin_dir, "ipptool", "exit 0\n")
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")

    def attributes(client):
        if "gone" in client.uri:
            raise enrol.ipp.IppUnreachable("no answer")
        return {"printer-name": "Lobby Printer"}

    monkeypatch.setattr(enrol.ipp.IppClient, "printer_attributes", attributes)
    found = enrol.discover(None, 1)
    assert found == [
        PrinterSpec("Office", "cups:Office", True),
        PrinterSpec("Labels", "cups:Labels", False),
        PrinterSpec("Lobby-Printer", "ipp://lobby.local:631/ipp/print", False),
    ]


def test_nothing_is_found_where_neither_cups_nor_ippfind_is_installed(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert enrol.discover(None, 1) == []


@pytest.mark.parametrize("bad", ["token = 'x'\n", "not toml ===\n"])
def test_enroll_refuses_to_complete_a_config_it_could_not_read(tmp_path, bad, capsys):
    config = tmp_path / "agent.toml"
    config.write_text(bad)
    assert enrol.enroll_main([URL, "--config", str(config)], start_agent=None) == 64
    assert "error: --config" in capsys.readouterr().err
    assert config.read_text() == bad


def test_enroll_refuses_to_start_where_it_could_not_write_the_token(tmp_path, capsys):
    """The token is handed out once: a config or token file that could not be written would lose
    it, so that is known before the server is asked (nothing answers at this URL)."""
    (tmp_path / "a-file").write_text("not a directory")
    config = tmp_path / "a-file" / "agent.toml"
    argv = ["http://127.0.0.1:9/qprint/", "--config", str(config)]
    assert enrol.enroll_main(argv, start_agent=None) == 64
    assert "cannot make" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("start", "poll"),
    [
        (httpx.Response(201, text="<html>welcome</html>"), None),
        (httpx.Response(201, json={"device_code": "d"}), None),  # keys missing
        (httpx.Response(201, json=["a"]), None),
        (None, httpx.Response(200, text="<html>ok</html>")),
        (None, httpx.Response(200, json={"token": "t"})),  # no tenant nor device
        (None, httpx.Response(404, json=[])),
    ],
)
def test_an_answer_that_is_no_qprint_enrolment_ends_it_saying_so(start, poll, monkeypatch):
    """Another application at the URL (an HTML page, a JSON of another shape) ends the enrolment
    with a sentence, never a traceback."""
    monkeypatch.setattr(enrol.time, "sleep", lambda seconds: None)
    started = {
        "device_code": "d",
        "user_code": "BCDF-GHJK",
        "verification_uri": "https://print.example.com/admin/",
        "expires_in": 600,
        "interval": 5,
    }

    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/token"):
            return poll
        return start if start is not None else httpx.Response(201, json=started)

    with (
        httpx.Client(transport=httpx.MockTransport(answer)) as client,
        pytest.raises(enrol.EnrolmentEnded) as ended,
    ):
        enrol.enrol(URL, io.StringIO(), client=client)
    assert ended.value.status == enrol.REFUSED
    assert "no qprint enrolment" in str(ended.value) or "enrolment failed" in str(ended.value)
