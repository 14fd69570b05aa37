"""Enrolment by code end to end (docs/AGENT.md, "Enrolling by code"): the reference agent
(``python -m qprint.agent enroll``) against two Daphne nodes on PostgreSQL and Redis, an operator
in a real browser (Playwright + Chromium) on the admin's "Enrol a device" page of the *other*
node. The code is shown, approved on node B, the agent collects its token from node A, connects
and prints a job to a raw printer; a refused code ends the agent's enrolment, a mistyped and a
reused code are refused on the page, an existing device re-enrolled from another machine
closes the old agent's socket with 4001, and a code nobody approves expires."""

from __future__ import annotations

import re

import httpx
import pytest

from qprint.models import Device, Enrolment
from tests.browser import browser_fixture, messages_on, new_page, screenshot, session_for
from tests.processes import ManagedProcess, python, wait_until
from tests.qprint.agent.raw import RecordingPrinter, print_raw
from tests.qprint.realtime.cluster import Node, node_env

pytestmark = [pytest.mark.slow, pytest.mark.services]

browser = browser_fixture()
CODE = re.compile(r"\b([BCDFGHJKLMNPQRSTVWXZ]{4}-[BCDFGHJKLMNPQRSTVWXZ]{4})\b")


@pytest.fixture
def nodes(live_database_url, services):
    """Nodes A and B on the test database and the run's Redis. (Not ``two_nodes``: its wait for
    the nodes' sessions to end would also wait for this test's own second connection, which
    Playwright's event loop in this thread makes Django open.)"""
    env = {"QPRINT_ENROLMENT_INTERVAL_SECONDS": "1", "DEBUG": "1"}  # DEBUG: static files
    a, b = (
        Node(name, node_env(live_database_url, services.redis_url, name, **env))
        for name in ("node-a", "node-b")
    )
    try:
        a.start()
        b.start()
        yield a, b
    finally:
        a.stop()
        b.stop()


@pytest.fixture
def enrol(subprocess_env, tmp_path):
    """Start ``python -m qprint.agent enroll URL`` for a machine of its own (a config dir)."""
    started: list[ManagedProcess] = []

    def start(url: str, machine: str, printer: RecordingPrinter | None = None) -> ManagedProcess:
        home = tmp_path / machine
        home.mkdir()
        config = home / "agent.toml"
        text = f'state_dir = "{home / "state"}"\nbackoff_max = 2\nname = "{machine}"\n'
        if printer:
            text += f'\n[[printers]]\nname = "labels"\nuri = "{printer.uri}"\n'
        config.write_text(text)
        env = {k: v for k, v in subprocess_env.items() if k != "DJANGO_ALLOW_ASYNC_UNSAFE"}
        process = ManagedProcess(
            f"enrol-{machine}",
            python(
                "-m",
                "qprint.agent",
                "enroll",
                url,
                "--config",
                str(config),
                "--discover-seconds",
                "1",
            ),
            env,
        ).start()
        started.append(process)
        return process

    yield start
    for process in started:
        process.stop()


def code_of(agent: ManagedProcess) -> str:
    return wait_until(
        lambda: (m := CODE.search(agent.log())) and m.group(1), 30, message="the code shown"
    )


def config_of(agent: ManagedProcess):
    from pathlib import Path

    return Path(agent.args[agent.args.index("--config") + 1])


def operator_page(browser, node, user, code: str = ""):
    page = new_page(browser, node.http, session_for(user))
    page.goto(f"{node.http}/admin/qprint/enrolment/" + (f"?code={code}" if code else ""))
    return page


def submit(page, button: str) -> None:
    with page.expect_navigation():
        page.click(f"input[name={button}]")


def test_enrol_on_one_node_approve_in_the_browser_on_the_other(
    browser, nodes, enrol, django_user_model
):
    node_a, node_b = nodes
    operator = django_user_model.objects.create_superuser("oncall", "oncall@example.com")
    printer = RecordingPrinter()
    agent = enrol(f"{node_a.http}/qprint/", "shop-7", printer)
    code = code_of(agent)
    assert f"{node_a.http}/admin/qprint/enrolment/" in agent.log()

    page = operator_page(browser, node_b, operator)
    screenshot(page, "admin-enrol-device")
    pending = page.inner_text("#qprint-pending-enrolments")
    assert "127.0.0.1" in pending and "Linux" in pending  # source address, platform
    # A mistyped code is refused on the page and approves nothing.
    page.fill("#id_code", "BBBB-BBBB")
    page.fill("#id_tenant", "acme")
    page.fill("#id_name", "shop-7")
    submit(page, "approve")
    assert "No pending enrolment has this code" in messages_on(page)
    assert not Device.objects.exists()

    page.fill("#id_code", code.lower())
    page.fill("#id_tenant", "acme")
    page.fill("#id_name", "shop-7")
    submit(page, "approve")
    assert "Enrolled device acme/shop-7 for the agent on" in messages_on(page)
    assert "No agent is waiting." in page.inner_text("#qprint-pending-enrolments")
    device = Device.objects.get(tenant="acme", name="shop-7")

    wait_until(
        lambda: "connected device=shop-7" in agent.log() or not agent.alive(),
        30,
        message="the enrolled agent connected",
    )
    assert agent.alive(), agent.log()[-3000:]
    token_file = config_of(agent).parent / "device.token"
    assert token_file.stat().st_mode & 0o777 == 0o600
    assert token_file.read_text().strip() not in page.content()  # never shown to the operator

    # A job through the application API on node B, printed by the agent connected to node A.
    print_raw(f"{node_b.http}/qprint/", "acme", "shop-7", b"^XA^FDhi^XZ", agent)
    assert printer.documents == [b"^XA^FDhi^XZ"]

    # The code is single use: typed again, it is refused.
    page.fill("#id_code", code)
    page.fill("#id_tenant", "acme")
    page.fill("#id_name", "shop-8")
    submit(page, "approve")
    assert "No pending enrolment has this code" in messages_on(page)

    # Another machine takes over the device: the old agent's socket closes 4001 (it stops, 3).
    successor = enrol(f"{node_b.http}/qprint/", "shop-7-new", printer)
    page.goto(f"{node_b.http}/admin/qprint/enrolment/?code={code_of(successor)}")
    assert page.input_value("#id_code") == code_of(successor)
    page.select_option("#id_device", label=str(device))
    submit(page, "approve")
    assert "Re-enrolled device acme/shop-7" in messages_on(page)
    assert agent.wait(30) == 3
    assert "code=4001" in agent.log()
    wait_until(
        lambda: "connected device=shop-7-new" in successor.log(),
        30,
        message=f"the successor connected; {successor.log()[-2000:]}",
    )
    assert Device.objects.count() == 1
    printer.close()


def test_a_refused_code_stops_the_agent_and_makes_nothing(browser, nodes, enrol, django_user_model):
    node_a, node_b = nodes
    operator = django_user_model.objects.create_superuser("oncall", "oncall@example.com")
    agent = enrol(f"{node_a.http}/qprint/", "stranger")
    page = operator_page(browser, node_b, operator, code_of(agent))
    submit(page, "deny")
    assert "Refused the enrolment" in messages_on(page)
    assert agent.wait(30) == 1
    assert "an operator refused this enrolment" in agent.log()
    assert not Device.objects.exists()
    assert "token_file" not in config_of(agent).read_text()
    assert not (config_of(agent).parent / "device.token").exists()


def test_a_staff_user_without_the_permission_sees_no_enrolment_page(
    browser, nodes, django_user_model
):
    _, node_b = nodes
    staff = django_user_model.objects.create_user("clerk", is_staff=True)
    page = new_page(browser, node_b.http, session_for(staff))
    response = page.goto(f"{node_b.http}/admin/qprint/enrolment/")
    assert response.status == 403
    assert Enrolment.objects.count() == 0


def test_a_code_nobody_approves_expires_and_guessed_codes_are_throttled(
    live_database_url, services, enrol
):
    env = node_env(
        live_database_url,
        services.redis_url,
        "node-x",
        QPRINT_ENROLMENT_INTERVAL_SECONDS="1",
        QPRINT_ENROLMENT_EXPIRES_SECONDS="2",
        QPRINT_AUTH_FAILURE_LIMIT="3",
    )
    node = Node("node-x", env).start()
    try:
        agent = enrol(f"{node.http}/qprint/", "forgotten")
        code_of(agent)
        assert agent.wait(30) == 1
        assert "the code expired before anyone approved it" in agent.log()
        assert not Device.objects.exists()

        token_url = f"{node.http}/qprint/api/v1/device/enrollments/token"
        answers = [
            httpx.post(token_url, json={"device_code": f"guess-{i}"}, timeout=10) for i in range(4)
        ]
        assert [(r.status_code, r.json()["error"]) for r in answers] == [
            (400, "invalid_grant"),
            (400, "invalid_grant"),
            (400, "invalid_grant"),
            (429, "rate_limited"),
        ]
        assert int(answers[-1].headers["Retry-After"]) > 0
        started = httpx.post(
            f"{node.http}/qprint/api/v1/device/enrollments", json={"agent_info": {}}, timeout=10
        )
        assert started.status_code == 429  # the guesser starts no enrolment either
    finally:
        node.stop()
