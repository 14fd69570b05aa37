"""The management commands: qprint_device, qprint_appkey, qprint_submit."""

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from qprint.domain import credentials
from qprint.models import ApplicationKey, Device, PrintJob
from tests.qprint.helpers import make_device

pytestmark = pytest.mark.django_db


def run(*args) -> list[str]:
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue().rstrip("\n").splitlines()


def test_device_create_prints_the_token_alone_on_the_last_line():
    lines = run("qprint_device", "create", "--tenant", "acme", "--name", "desk")
    token = lines[-1]
    device = Device.objects.get(tenant="acme", name="desk")
    assert credentials.device_for_token(token).pk == device.pk
    assert token not in device.token_hash
    assert all(token not in line for line in lines[:-1])


def test_device_create_twice_is_a_command_error():
    run("qprint_device", "create", "--tenant", "acme", "--name", "desk")
    with pytest.raises(CommandError, match="already exists"):
        run("qprint_device", "create", "--tenant", "acme", "--name", "desk")


def test_rotate_token_invalidates_the_old_token():
    old = run("qprint_device", "create", "--tenant", "acme", "--name", "desk")[-1]
    new = run("qprint_device", "rotate-token", "--tenant", "acme", "--name", "desk")[-1]
    assert new != old
    assert credentials.device_for_token(old) is None
    assert credentials.device_for_token(new).name == "desk"


def test_rotate_token_of_an_unknown_device_is_a_command_error():
    with pytest.raises(CommandError, match="No device named 'ghost'"):
        run("qprint_device", "rotate-token", "--tenant", "acme", "--name", "ghost")


def test_disable_and_enable():
    make_device("acme", "desk")
    run("qprint_device", "disable", "--tenant", "acme", "--name", "desk")
    assert not Device.objects.get(name="desk").enabled
    run("qprint_device", "enable", "--tenant", "acme", "--name", "desk")
    assert Device.objects.get(name="desk").enabled


def test_device_list_shows_each_device():
    make_device("acme", "desk")
    make_device("globex", "lobby")
    lines = run("qprint_device", "list")
    assert lines[0].split()[:4] == ["TENANT", "NAME", "KIND", "ENABLED"]
    assert [line.split()[:3] for line in lines[1:]] == [
        ["acme", "desk", "agent"],
        ["globex", "lobby", "agent"],
    ]
    assert len(run("qprint_device", "list", "--tenant", "acme")) == 2


def test_a_missing_action_is_a_command_error():
    with pytest.raises(CommandError):
        run("qprint_device")


def test_appkey_create_prints_the_key_last_and_revoke_stops_it():
    secret = run("qprint_appkey", "create", "--tenant", "acme", "--name", "backend")[-1]
    assert credentials.key_for_secret(secret).name == "backend"
    listing = run("qprint_appkey", "list")
    assert [line.split()[:2] for line in listing[1:]] == [["acme", "backend"]]
    assert all(secret not in line for line in listing)
    run("qprint_appkey", "revoke", "--tenant", "acme", "--name", "backend")
    assert credentials.key_for_secret(secret) is None
    assert len(run("qprint_appkey", "list")) == 1
    assert len(run("qprint_appkey", "list", "--all")) == 2
    with pytest.raises(CommandError, match="No live key"):
        run("qprint_appkey", "revoke", "--tenant", "acme", "--name", "backend")
    # the name is free again once revoked
    run("qprint_appkey", "create", "--tenant", "acme", "--name", "backend")
    assert ApplicationKey.objects.filter(name="backend").count() == 2


def test_submit_queues_the_file(tmp_path):
    device = make_device("acme", "desk").device
    path = tmp_path / "label.pdf"
    path.write_bytes(b"%PDF-1.4 label")
    lines = run("qprint_submit", "--device", "desk", str(path), "--copies", "2", "--priority", "3")
    job = PrintJob.objects.get()
    assert lines[-1] == str(job.pk)
    assert (job.device_id, job.title, job.content_type, job.priority, job.options) == (
        device.pk,
        "label.pdf",
        "application/pdf",
        3,
        {"copies": 2},
    )
    assert bytes(job.document.content) == b"%PDF-1.4 label"


def test_submit_refuses_what_the_api_refuses(tmp_path):
    make_device("acme", "desk")
    make_device("globex", "desk")
    page = tmp_path / "page.html"
    page.write_text("<html>")
    with pytest.raises(CommandError, match="pass --tenant"):
        run("qprint_submit", "--device", "desk", str(page))
    with pytest.raises(CommandError, match="not supported"):
        run("qprint_submit", "--device", "desk", "--tenant", "acme", str(page))
    with pytest.raises(CommandError, match="Cannot read"):
        run("qprint_submit", "--device", "desk", "--tenant", "acme", str(tmp_path / "missing"))
    with pytest.raises(CommandError, match="No device named"):
        run("qprint_submit", "--device", "nope", str(page))
    assert not PrintJob.objects.exists()


@pytest.mark.parametrize("options", ["[1]", '"x"', "3", "[" * 5000 + "]" * 5000])
def test_submit_options_that_are_no_object_are_a_command_error(tmp_path, options):
    make_device("acme", "desk")
    page = tmp_path / "page.pdf"
    page.write_bytes(b"%PDF-1.4\n%%EOF\n")
    with pytest.raises(CommandError, match="--options"):
        run("qprint_submit", "--device", "desk", "--options", options, "--copies", "2", str(page))
    assert not PrintJob.objects.exists()


# A byte of the command line that is not UTF-8 reaches Python as a lone surrogate.
NOT_UTF8 = b"\xff".decode("utf-8", "surrogateescape")


@pytest.mark.parametrize(
    "argv",
    [
        ("qprint_appkey", "list", "--tenant", NOT_UTF8),
        ("qprint_appkey", "revoke", "--tenant", "acme", "--name", NOT_UTF8),
        ("qprint_device", "list", "--tenant", NOT_UTF8),
        ("qprint_device", "rotate-token", "--tenant", "acme", "--name", f"desk{NOT_UTF8}"),
        ("qprint_webhook", "list", "--tenant", NOT_UTF8),
        ("qprint_submit", "--device", NOT_UTF8, "page.pdf"),
        ("cluster_drain", "--node-id", NOT_UTF8),
        ("qprint_device", "create", "--tenant", "acme", "--name", "desk\x00"),
    ],
)
def test_text_the_database_cannot_hold_is_a_command_error(argv):
    with pytest.raises(CommandError, match="hold"):
        run(*argv)
