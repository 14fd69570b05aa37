"""``manage.py qprint_device approve CODE`` / ``deny CODE``: an agent's enrolment decided from a
shell; the agent, never the operator, receives the token."""

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from qprint.core.errors import EnrolmentRefused
from qprint.domain import credentials, enrolment
from qprint.models import Device, Enrolment

pytestmark = pytest.mark.django_db

INFO = {"hostname": "shop-7", "platform": "Linux"}


def run(*args) -> str:
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def collect(device_code: str):
    Enrolment.objects.update(last_polled_at=None)
    return enrolment.poll(device_code, source="192.0.2.1")


def test_approve_makes_the_device_and_prints_no_token():
    started = enrolment.start(INFO, source="192.0.2.1")
    out = run("qprint_device", "approve", started.user_code, "--tenant", "acme", "--name", "shop")
    assert "Enrolled device acme/shop for the agent on shop-7 (192.0.2.1)" in out
    grant = collect(started.device_code)
    assert grant.token not in out
    assert credentials.device_for_token(grant.token) == Device.objects.get(name="shop")


def test_approve_existing_re_enrols_the_device_and_cuts_the_old_token_off():
    device, old = credentials.create_device("acme", "shop")
    started = enrolment.start(INFO, source="192.0.2.1")
    out = run(
        "qprint_device",
        "approve",
        started.user_code,
        "--tenant",
        "acme",
        "--name",
        "shop",
        "--existing",
    )
    assert "Re-enrolled device acme/shop" in out
    assert credentials.device_for_token(old) is None
    assert credentials.device_for_token(collect(started.device_code).token) == device


def test_deny_and_unknown_codes():
    started = enrolment.start(INFO, source="192.0.2.1")
    assert "Refused" in run("qprint_device", "deny", started.user_code)
    with pytest.raises(EnrolmentRefused, match="refused"):
        collect(started.device_code)
    with pytest.raises(CommandError, match="No pending enrolment has this code"):
        run("qprint_device", "approve", started.user_code, "--tenant", "a", "--name", "b")
    with pytest.raises(CommandError, match="No device named"):
        run("qprint_device", "approve", "BBBB-BBBB", "--tenant", "a", "--name", "b", "--existing")
    assert not Device.objects.exists()
