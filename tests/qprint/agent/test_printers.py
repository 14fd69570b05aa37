"""Printers by URI, the agent's config file, job options, and raw printers on a real TCP socket."""

import hashlib
import socket
import threading

import pytest

from qprint.agent import options as o
from qprint.agent.__main__ import build_parser, config_from, make_backend, parse
from qprint.agent.printers import (
    IppPrinter,
    Printers,
    SocketPrinter,
    check_uri,
    make_printers,
    parse_printer_argument,
)
from qprint.agent.spoolers import (
    CupsSpooler,
    DirectorySpooler,
    NullSpooler,
    SpoolInterrupted,
    SpoolJob,
    SpoolRejected,
)
from qprint.agent.systemd import build_parser as unit_parser
from qprint.agent.systemd import render


def _job(data=b"^XA^FDhello^FS^XZ", printer=None, options=None, job_id="j1"):
    return SpoolJob(job_id, "label", "application/vnd.zebra-zpl", data, printer, options or {})


# -- URIs and the printer set ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("uri", "scheme"),
    [
        ("cups:Office", "cups"),
        ("cups:", "cups"),
        ("ipp://10.0.0.7/ipp/print", "ipp"),
        ("ipps://printer.example:443/ipp/print", "ipps"),
        ("socket://10.0.0.9", "socket"),
        ("socket://10.0.0.9:9101", "socket"),
        ("dir:/tmp/x", "dir"),
        ("null:", "null"),
    ],
)
def test_each_scheme_is_known(uri, scheme):
    assert check_uri(uri) == scheme


@pytest.mark.parametrize(
    ("uri", "message"),
    [
        ("lpr://host/q", "the scheme must be one of"),
        ("socket://", "has no host"),
        ("socket://host:99999", "out of range"),
        ("dir:", "needs a path"),
        ("Office", "the scheme must be one of"),
    ],
)
def test_a_bad_uri_is_named(uri, message):
    with pytest.raises(ValueError, match=message):
        check_uri(uri)


def test_printer_argument_is_name_equals_uri():
    spec = parse_printer_argument("labels=socket://10.0.0.9")
    assert (spec.name, spec.uri) == ("labels", "socket://10.0.0.9")
    with pytest.raises(ValueError, match="expected NAME=URI"):
        parse_printer_argument("socket://10.0.0.9")


def one_of_each_scheme(tmp_path):
    """A printer of each scheme the agent knows, ``labels`` (the raw one) the default."""
    schemes = ["office=cups:Office", "labels=socket://10.0.0.9", "lobby=ipp://10.0.0.7/ipp/print",
               f"archive=dir:{tmp_path}", "void=null:"]  # fmt: skip
    return make_printers([parse_printer_argument(a) for a in schemes], "labels")


def test_backends_by_scheme_and_the_default_port(tmp_path):
    printers = one_of_each_scheme(tmp_path)
    b = printers.backends
    assert isinstance(b["office"], CupsSpooler) and b["office"].queue == "Office"
    assert isinstance(b["labels"], SocketPrinter) and b["labels"].port == 9100
    assert isinstance(b["lobby"], IppPrinter)
    assert isinstance(b["archive"], DirectorySpooler)
    assert isinstance(b["void"], NullSpooler)
    assert printers.default == "labels"


def test_a_job_is_settled_at_submission_by_a_file_or_a_raw_printer_and_followed_in_a_spooler(
    tmp_path,
):
    printers = one_of_each_scheme(tmp_path)
    settled = {name: printers.settled(f"{name}|ref-1") for name in printers.backends}
    assert {name: s and s.status for name, s in settled.items()} == {
        "office": None,  # CUPS holds the job: followed until it ends
        "labels": "PRINTED",
        "lobby": None,  # the IPP printer holds the job: followed
        "archive": "PRINTED",
        "void": "PRINTED",
    }


def test_a_jobs_printer_picks_the_printer_and_none_picks_the_default(tmp_path):
    a, b = DirectorySpooler(tmp_path / "a"), DirectorySpooler(tmp_path / "b")
    printers = Printers({"a": a, "b": b}, default="b")
    ref_b = printers.submit(_job(job_id="to-default"))
    ref_a = printers.submit(_job(job_id="to-a", printer="a"))
    assert ref_b.startswith("b|") and ref_a.startswith("a|")
    assert [p.name for p in (tmp_path / "b").glob("to-*")] == ["to-default.bin"]
    assert [p.name for p in (tmp_path / "a").glob("to-*")] == ["to-a.bin"]
    assert printers.follow(ref_a, 1).status == "PRINTED"
    with pytest.raises(SpoolRejected, match="no printer named 'c'"):
        printers.submit(_job(printer="c"))


def test_printers_are_listed_with_the_default_marked_and_an_unreachable_one_kept():
    printers = Printers(
        {"void": NullSpooler(), "gone": SocketPrinter("127.0.0.1", 9)}, default="void"
    )
    listed = printers.printers()
    assert [(p["name"], p["is_default"]) for p in listed] == [("void", True), ("gone", False)]
    assert listed[1]["capabilities"]["raw"] is True


def test_printer_names_are_unique_and_the_default_exists():
    with pytest.raises(ValueError, match="unique"):
        make_printers([parse_printer_argument("a=null:"), parse_printer_argument("a=null:")], None)
    with pytest.raises(ValueError, match="not one of the printers"):
        make_printers([parse_printer_argument("a=null:")], "b")


# -- the command line and agent.toml ---------------------------------------------------------


def _config(argv):
    return config_from(parse(build_parser(), argv))


def test_printers_from_the_command_line():
    config = _config(
        [
            "--url",
            "http://s/qprint/",
            "--token",
            "t",
            "--printer",
            "a=null:",
            "--printer",
            "b=socket://127.0.0.1:9",
            "--default-printer",
            "b",
        ]
    )
    assert [(p.name, p.uri) for p in config.printers] == [
        ("a", "null:"),
        ("b", "socket://127.0.0.1:9"),
    ]
    assert config.default_printer == "b"
    assert make_backend(config).default == "b"


def test_the_old_spooler_flags_keep_working(tmp_path):
    config = _config(
        [
            "--url",
            "http://s/",
            "--token",
            "t",
            "--spooler",
            "directory",
            "--spool-dir",
            str(tmp_path),
        ]
    )
    assert isinstance(make_backend(config), DirectorySpooler)
    with pytest.raises(ValueError, match="not both"):
        _config(["--url", "http://s/", "--token", "t", "--spooler", "null", "--printer", "a=null:"])


def test_agent_toml_gives_the_same_settings_and_the_command_line_wins(tmp_path):
    token = tmp_path / "device.token"
    token.write_text("secret\n")
    toml = tmp_path / "agent.toml"
    toml.write_text(
        'url = "http://lb/qprint/"\n'
        f'token_file = "{token}"\n'
        "follow_timeout = 120\n"
        '[[printers]]\nname = "office"\nuri = "cups:Office"\n'
        '[[printers]]\nname = "labels"\nuri = "socket://10.0.0.9"\ndefault = true\n'
    )
    config = _config(["--config", str(toml), "--follow-timeout", "30", "--printer", "x=null:"])
    assert config.urls == ["http://lb/qprint/"]
    assert config.devices[0].token == "secret"
    assert config.follow_timeout == 30
    assert [p.name for p in config.printers] == ["office", "labels", "x"]
    assert make_backend(config).default == "labels"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('token = "abc"\n', "does not belong in the file"),
        ('colour = "red"\n', "unknown setting 'colour'"),
        ('[[printers]]\nname = "a"\n', "needs a name and a uri"),
        ('[[printers]]\nname = "a"\nuri = "lpr:x"\n', "scheme must be one of"),
        ("url = \n", "agent.toml"),
    ],
)
def test_a_bad_agent_toml_is_named(tmp_path, text, message):
    toml = tmp_path / "agent.toml"
    toml.write_text(text)
    with pytest.raises(ValueError, match=message):
        _config(["--config", str(toml), "--url", "http://s/", "--token", "t"])


def test_the_systemd_unit_restarts_keeps_the_journal_and_never_has_the_token_on_its_command_line():
    unit = render(unit_parser().parse_args(["--config", "/etc/qprint/agent.toml"]))
    assert "Restart=on-failure" in unit
    assert "StateDirectory=qprint-agent" in unit
    assert "QPRINT_AGENT_STATE_DIR=%S/qprint-agent" in unit
    assert "LoadCredential=device-token:/etc/qprint/device.token" in unit
    exec_start = next(line for line in unit.splitlines() if line.startswith("ExecStart="))
    assert "--token-file ${CREDENTIALS_DIRECTORY}/device-token" in exec_start
    assert "--token " not in exec_start
    env_unit = render(unit_parser().parse_args(["--environment-file", "/etc/qprint/agent.env"]))
    assert "EnvironmentFile=/etc/qprint/agent.env" in env_unit
    assert "--token" not in env_unit


# -- options ---------------------------------------------------------------------------------


def test_options_map_to_lp_and_to_ipp():
    opts = o.normalize(
        {
            "copies": 2,
            "duplex": True,
            "media": "iso_a4_210x297mm",
            "page_ranges": "1-3,5",
            "orientation": "landscape",
            "color": False,
            "fit": "scale",
        }
    )
    assert o.lp_arguments(opts) == [
        "-n",
        "2",
        "-o",
        "sides=two-sided-long-edge",
        "-o",
        "media=iso_a4_210x297mm",
        "-P",
        "1-3,5",
        "-o",
        "orientation-requested=4",
        "-o",
        "print-color-mode=monochrome",
        "-o",
        "fit-to-page",
    ]
    assert o.ipp_attributes(opts) == [
        ("integer", "copies", "2"),
        ("keyword", "sides", "two-sided-long-edge"),
        ("keyword", "media", "iso_a4_210x297mm"),
        ("rangeOfInteger", "page-ranges", "1-3,5-5"),
        ("enum", "orientation-requested", "4"),
        ("keyword", "print-color-mode", "monochrome"),
        ("keyword", "print-scaling", "fit"),
    ]
    assert o.normalize({"sides": "two-sided-short-edge"}).sides == "two-sided-short-edge"
    assert o.normalize({"duplex": "short-edge"}).sides == "two-sided-short-edge"
    assert o.normalize({}).plain and o.lp_arguments(o.normalize({})) == []


@pytest.mark.parametrize(
    ("options", "option"),
    [
        ({"copies": 0}, "copies"),
        ({"copies": "2"}, "copies"),
        ({"duplex": "sideways"}, "duplex"),
        ({"fit": "stretch"}, "fit"),
        ({"sides": "both"}, "sides"),
        ({"media": "a4; rm -rf /"}, "media"),
        ({"page_ranges": "3-1"}, "page_ranges"),
        ({"orientation": "upside-down"}, "orientation"),
        ({"color": "sepia"}, "color"),
    ],
)
def test_a_malformed_option_is_named(options, option):
    with pytest.raises(o.OptionError) as info:
        o.normalize(options)
    assert info.value.option == option
    assert f"option '{option}'" in str(info.value)


def test_an_option_the_printer_cannot_do_is_refused_with_what_it_can():
    caps = {
        "sides": ["one-sided"],
        "media": ["na_letter_8.5x11in"],
        "color": False,
        "copies_max": 5,
    }
    o.check(o.normalize({"copies": 5, "media": "na_letter_8.5x11in"}), caps, "p")
    for options, option in (
        ({"duplex": True}, "sides"),
        ({"media": "iso_a4_210x297mm"}, "media"),
        ({"color": True}, "color"),
        ({"copies": 6}, "copies"),
    ):
        with pytest.raises(o.OptionError, match=f"option '{option}': printer 'p' cannot do"):
            o.check(o.normalize(options), caps, "p")
    o.check(o.normalize({"duplex": True, "color": True}), {}, "p")  # unknown: nothing refused


# -- raw printers: a TCP listener on 127.0.0.1 -----------------------------------------------


class Listener:
    """A raw printer on 127.0.0.1: reads everything (or ``close_after`` bytes, then closes)."""

    def __init__(self, close_after: int | None = None):
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.close_after = close_after
        self.received = bytearray()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        conn, _ = self.server.accept()
        with conn:
            while True:
                chunk = conn.recv(65536)
                if not chunk:
                    break
                self.received += chunk
                if self.close_after is not None and len(self.received) >= self.close_after:
                    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\0\0\0\0\0\0\0")
                    break  # closes with unread data: the sender sees its connection broken

    def close(self):
        self.thread.join(10)
        self.server.close()


def test_raw_bytes_arrive_identical_and_the_job_is_printed():
    listener = Listener()
    data = bytes(range(256)) * 4096 + b"\x1b@\x1dV\x00"  # 1 MiB of every byte, ESC/POS cut
    ref = SocketPrinter("127.0.0.1", listener.port).submit(_job(data))
    listener.close()
    assert hashlib.sha256(listener.received).digest() == hashlib.sha256(data).digest()
    assert ref.endswith(f":{len(data)}")


def test_a_listener_closing_mid_document_is_outcome_unknown():
    listener = Listener(close_after=64 * 1024)
    with pytest.raises(SpoolInterrupted, match="broke after"):
        SocketPrinter("127.0.0.1", listener.port, write_timeout=10).submit(
            _job(b"\0" * (32 * 1024 * 1024))
        )
    listener.close()
    assert 0 < len(listener.received) < 32 * 1024 * 1024


def test_a_printer_that_never_accepts_fails_after_the_connect_timeout():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(0)
    port = server.getsockname()[1]
    # Fill the accept queue: from then on the kernel drops new SYNs, as an overloaded or
    # hung printer does; nothing is ever accepted.
    fillers = []
    for _ in range(4):
        f = socket.socket()
        f.setblocking(False)
        f.connect_ex(("127.0.0.1", port))
        fillers.append(f)
    try:
        with pytest.raises(SpoolRejected, match="could not connect"):
            SocketPrinter("127.0.0.1", port, connect_timeout=1).submit(_job())
    finally:
        for f in fillers:
            f.close()
        server.close()


def test_a_refused_connection_fails_and_options_a_raw_printer_cannot_apply_are_refused():
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()
    with pytest.raises(SpoolRejected, match="could not connect"):
        SocketPrinter("127.0.0.1", port).submit(_job())
    with pytest.raises(SpoolRejected, match="cannot apply copies, sides"):
        SocketPrinter("127.0.0.1", port).submit(_job(options={"copies": 2, "duplex": True}))


@pytest.mark.parametrize("bad", ["bogus = 1\n", "not toml ===\n"])
def test_install_with_a_config_the_agent_could_not_read_installs_nothing(tmp_path, capsys, bad):
    """Named in one line with exit status 64 before any step (a traceback before)."""
    from qprint.agent.systemd import unit_main

    config = tmp_path / "agent.toml"
    config.write_text(bad)
    assert unit_main(["--install", "--dry-run", "--config", str(config)]) == 64
    err = capsys.readouterr().err
    assert err.startswith("error: --config") and "Traceback" not in err
