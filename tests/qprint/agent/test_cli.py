"""The agent's command line: every option explained, bad input named, no Django inside."""

import os
import subprocess
import sys

import pytest

from qprint.agent.__main__ import build_parser, config_from, main, make_backend, parse
from tests.processes import ManagedProcess, manage, python, wait_until


def test_help_explains_every_option():
    parser = build_parser()
    text = parser.format_help()
    for action in parser._actions:
        assert action.help, f"{action.option_strings} has no help"
        for option in action.option_strings:
            assert option in text


def test_missing_server_or_token_is_named_with_exit_status_64(capsys, monkeypatch):
    monkeypatch.delenv("QPRINT_AGENT_TOKEN", raising=False)
    monkeypatch.delenv("QPRINT_AGENT_URLS", raising=False)
    assert main(["--token", "t"]) == 64
    assert "no server" in capsys.readouterr().err
    assert main(["--url", "http://x/qprint/"]) == 64
    assert "no device token" in capsys.readouterr().err
    assert main(["--url", "http://x/qprint/", "--token", "t", "--spooler", "directory"]) == 64
    assert "--spool-dir" in capsys.readouterr().err


def test_without_a_printer_the_agent_refuses_to_start_and_says_how(capsys, monkeypatch):
    """No silent null spooler: real jobs would be reported PRINTED with nothing printed."""
    monkeypatch.delenv("QPRINT_AGENT_TOKEN", raising=False)
    assert main(["--url", "http://x/qprint/", "--token", "t"]) == 64
    err = capsys.readouterr().err
    assert "error: no printer" in err
    assert "--printer office=cups:Office" in err and "--printer test=null:" in err


@pytest.mark.parametrize(
    "printer_args",
    [["--printer", "test=null:"], ["--spooler", "null"], ["--printer", "desk=dir:/tmp/x"]],
    ids=["null-printer", "null-spooler", "dir-printer"],
)
def test_a_printer_given_explicitly_null_included_is_accepted(printer_args):
    args = parse(build_parser(), ["--url", "http://x/qprint/", "--token", "t", *printer_args])
    assert make_backend(config_from(args)) is not None


def test_the_agent_runs_without_django():
    code = (
        "import sys, qprint.agent.__main__, qprint.agent.device;"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('django', 'channels', 'qcluster')];"
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_manage_py_qprint_agent_is_the_same_command():
    result = subprocess.run(
        manage("qprint_agent", "--help"), capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert "--spool-dir" in result.stdout and "--devices N" in result.stdout


@pytest.mark.slow
def test_an_agent_pointed_at_a_url_without_the_socket_says_why_once(tmp_path):
    """A server that answers 404 at the socket (Django's runserver, a wrong mount point): the
    agent keeps retrying, and says once what is probably wrong."""
    import http.server
    import threading

    class NotFound(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # as Django's runserver

        def do_GET(self):
            self.send_error(404)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), NotFound)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/wrong/"
    agent = ManagedProcess(
        "agent-404",
        python(
            "-m",
            "qprint.agent",
            "--url",
            url,
            "--token",
            "t",
            "--printer",
            "test=null:",
            "--state-dir",
            str(tmp_path),
            "--backoff-initial",
            "0.05",
            "--backoff-max",
            "0.1",
        ),
        dict(os.environ),
    ).start()
    try:
        wait_until(
            lambda: agent.log().count("connect_failed") >= 3, 30, message="three failed connects"
        )
    finally:
        agent.stop()
        server.shutdown()
    log = agent.log()
    assert log.count("connect_refused") == 1, log
    assert "status=404: nothing serves the device socket at this URL" in log
    assert f"url=ws://127.0.0.1:{server.server_address[1]}/wrong/ws/device/" in log
