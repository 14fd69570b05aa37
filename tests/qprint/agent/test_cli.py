"""The agent's command line: every option explained, bad input named, no Django inside."""

import subprocess
import sys

from qprint.agent.__main__ import build_parser, main
from tests.processes import manage


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
