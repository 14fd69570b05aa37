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


BAD_SETTINGS = [
    # (command line, agent.toml, what the one-line error names)
    (["--token-file", "{tmp}/missing.token"], "", "token file {tmp}/missing.token"),
    (["--token-file", "{tmp}"], "", "token file {tmp}"),  # a directory
    ([], "url = 5", "urls must be a URL"),
    ([], "name = 5", "name must be a string"),
    ([], "state_dir = 5", "state_dir must be a string"),
    ([], 'log_level = "verbose"', "log_level must be one of"),
    ([], "printers_poll = [1]", "printers_poll must be a number"),
    ([], "printers_poll = 0", "above 0"),
    ([], 'report_printers = "no"', "report_printers must be true or false"),
    ([], 'devices = "two"', "devices must be a number"),
    (["--printers-poll", "0"], "", "above 0"),
    (["--printers-poll", "nan"], "", "above 0"),
    (["--url", "localhost:8000"], "", "unsupported URL scheme"),
    (["--url", "http://"], "", "no host"),
    (["--url", "http://h:99999/"], "", "no valid port"),
    (["--state-dir", "{tmp}/a-file/journals"], "", "--state-dir {tmp}/a-file/journals"),
    (["--printer", "t=dir:{tmp}/a-file/x"], "", "a-file"),
    (["--bogus"], "", "unrecognized arguments: --bogus"),
    (["--printer", "t=foo://x"], "", "foo"),
]


@pytest.mark.parametrize(("argv", "toml", "named"), BAD_SETTINGS)
def test_a_mistake_in_the_settings_is_one_line_and_exit_status_64(
    tmp_path, capsys, monkeypatch, argv, toml, named
):
    """Never a traceback, nor argparse's exit status 2 (the agent's "a token was refused"): a
    file's value is checked as the command line's is."""
    monkeypatch.delenv("QPRINT_AGENT_TOKEN", raising=False)
    (tmp_path / "a-file").write_text("not a directory")
    config = tmp_path / "agent.toml"
    config.write_text(toml + "\n")
    base = {
        "--url": "http://127.0.0.1:9/qprint/",
        "--token": "t",
        "--printer": "test=null:",
        "--state-dir": str(tmp_path / "state"),
    }
    given = [arg.format(tmp=tmp_path) for arg in argv]
    args = ["--config", str(config), *given]
    for option, value in base.items():
        replaced = option in given or (option == "--token" and "--token-file" in given)
        if not replaced and not (option == "--url" and toml.startswith("url")):
            args += [option, value]
    try:
        status = main(args)
    except SystemExit as exited:  # argparse's own refusals
        status = exited.code
    assert status == 64
    err = capsys.readouterr().err
    assert named.format(tmp=tmp_path) in err, err
    assert "Traceback" not in err


def test_a_log_level_in_any_case_and_the_operations_setting_are_read(tmp_path, monkeypatch):
    monkeypatch.setenv("QPRINT_AGENT_LOG_LEVEL", "debug")
    config = tmp_path / "agent.toml"
    config.write_text('operations = "http"\n')
    args = parse(build_parser(), ["--config", str(config)])
    assert (args.log_level, args.operations) == ("DEBUG", "http")


def test_the_environment_token_wins_over_the_config_token_file(tmp_path, monkeypatch):
    """A systemd unit with an environment file (QPRINT_AGENT_TOKEN) never reads the token file
    the config names, which stays readable by root only; the command line wins over both."""
    monkeypatch.setenv("QPRINT_AGENT_TOKEN", "from-the-environment")
    config = tmp_path / "agent.toml"
    config.write_text(
        f'url = "http://127.0.0.1:9/qprint/"\ntoken_file = "{tmp_path}/root-only.token"\n'
        '[[printers]]\nname = "t"\nuri = "null:"\n'
    )
    state = ["--state-dir", str(tmp_path / "state")]
    args = parse(build_parser(), ["--config", str(config), *state])
    assert [d.token for d in config_from(args).devices] == ["from-the-environment"]
    args = parse(build_parser(), ["--config", str(config), "--token", "given", *state])
    assert [d.token for d in config_from(args).devices] == ["given"]
