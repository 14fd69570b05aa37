"""The agent as a real process against a real Daphne node of the example project: a job submitted
through the application API ends PRINTED, written once by the spooler (directory, then CUPS)."""

import base64
import hashlib
from urllib.parse import urlsplit

import httpx
import pytest

from qprint import api
from qprint.agent.protocol import INLINE_MAX_BYTES
from tests import services
from tests.processes import ManagedProcess, daphne_node, free_port, port_open, python
from tests.qprint.agent.cups import CupsServer, minimal_pdf, unavailable_reason
from tests.tls import TlsFront, certificate
from tests.waiting import wait_until

pytestmark = [pytest.mark.services, pytest.mark.slow]


@pytest.fixture
def node(subprocess_env):
    """One Daphne node of the example project on the test database, heartbeat 1 s."""
    env = {**subprocess_env, "QPRINT_HEARTBEAT_SECONDS": "1", "QQQ_NODE_ID": "node-a"}
    port = free_port()
    proc = daphne_node("node-a", port, env).start()
    try:
        wait_until(lambda: port_open(port) or not proc.alive(), 30, message="daphne up")
        assert proc.alive(), proc.log()
        yield f"http://127.0.0.1:{port}/qprint/"
    finally:
        proc.stop()


@pytest.fixture
def tenant(transactional_db):
    """A device and an application key of tenant ``acme``."""
    device, token = api.create_device("acme", "front-desk")
    _, key = api.create_application_key("acme", "e2e")
    return {"device": device.name, "token": token, "key": key}


@pytest.fixture
def start_agent(subprocess_env, tmp_path):
    agents: list[ManagedProcess] = []

    def start(url: str, token: str, *spooler_args: str, env=None) -> ManagedProcess:
        token_file = tmp_path / f"token-{len(agents)}"
        token_file.write_text(token)
        args = python(
            "-m",
            "qprint.agent",
            "--url",
            url,
            "--token-file",
            str(token_file),
            "--state-dir",
            str(tmp_path / "state"),
            "--backoff-max",
            "2",
            *spooler_args,
        )
        agent = ManagedProcess(f"agent-{len(agents)}", args, {**subprocess_env, **(env or {})})
        agent.start()
        agents.append(agent)
        return agent

    yield start
    for agent in agents:
        agent.stop()


def submit(base: str, key: str, device: str, document: bytes, title: str = "e2e") -> dict:
    response = httpx.post(
        base + "api/v1/jobs",
        headers={"Authorization": f"Bearer {key}"},
        json={
            "device": device,
            "title": title,
            "content_type": "application/pdf",
            "content_base64": base64.b64encode(document).decode(),
        },
        timeout=10,
    )
    assert response.status_code == 201, response.text
    return response.json()


def job_status(base: str, key: str, job_id: str) -> dict:
    response = httpx.get(
        base + f"api/v1/jobs/{job_id}", headers={"Authorization": f"Bearer {key}"}, timeout=10
    )
    response.raise_for_status()
    return response.json()


def wait_final(base: str, key: str, job_id: str, agent: ManagedProcess, timeout: float = 30):
    final = {"PRINTED", "FAILED", "OUTCOME_UNKNOWN", "CANCELLED", "EXPIRED"}
    return wait_until(
        lambda: (j := job_status(base, key, job_id))["status"] in final and j,
        timeout,
        message=lambda: f"job {job_id} final; agent log:\n{agent.log()[-3000:]}",
    )


def test_job_through_the_application_api_is_printed_once_by_the_directory_spooler(
    node, tenant, start_agent, tmp_path
):
    spool = tmp_path / "printed"
    agent = start_agent(node, tenant["token"], "--spooler", "directory", "--spool-dir", str(spool))
    document = minimal_pdf("end to end")
    job = submit(node, tenant["key"], tenant["device"], document)
    assert job["sha256"] == hashlib.sha256(document).hexdigest()

    final = wait_final(node, tenant["key"], job["id"], agent)

    assert final["status"] == "PRINTED", final
    assert [e["type"] for e in final["events"] if e["source"] == "DEVICE"] == [
        "RECEIVED",
        "SPOOLED",
        "PRINTED",
    ]
    assert (spool / f"{job['id']}.pdf").read_bytes() == document
    ledger = (spool / "spool-ledger.log").read_text().splitlines()
    assert [line.split()[1:3] for line in ledger] == [["written", job["id"]]]


@pytest.mark.parametrize("operations", ["http", "socket"])
def test_an_agent_claiming_for_itself_gets_a_small_document_inline_and_downloads_a_large_one(
    node, tenant, start_agent, tmp_path, operations
):
    spool = tmp_path / "printed"
    agent = start_agent(
        node,
        tenant["token"],
        *("--spooler", "directory", "--spool-dir", str(spool)),
        *("--operations", operations),
    )
    small = minimal_pdf("inline")
    large = small + b"%" + b"x" * INLINE_MAX_BYTES + b"\n"  # a comment after the end
    jobs = [submit(node, tenant["key"], tenant["device"], doc) for doc in (small, large)]
    for job, document in zip(jobs, (small, large), strict=True):
        assert wait_final(node, tenant["key"], job["id"], agent)["status"] == "PRINTED"
        assert (spool / f"{job['id']}.pdf").read_bytes() == document
    log = agent.log()
    assert f"job={jobs[0]['id']}" in log and f"job={jobs[1]['id']}" in log
    claimed = [line for line in log.splitlines() if "job_claimed" in line]
    assert [line.split("document=")[1].split()[0] for line in claimed] == ["inline", "download"]
    # Over HTTP a job's SPOOLED and PRINTED went as one list, which the server took.
    assert "event_lists_not_taken" not in log and "report_rejected" not in log


def test_an_agent_behind_tls_sends_nothing_in_the_clear_and_prints(
    node, tenant, start_agent, tmp_path
):
    """``wss://`` through a TLS front (a proxy terminating TLS for the node): the claim comes over
    the socket, its document URL is resolved against the agent's own ``https`` base, so the
    document and the token travel over TLS only. A document larger than the agent asks for
    inline, so that it is downloaded."""
    certs = tmp_path / "certs"
    certs.mkdir()
    cert, key = certificate("localhost", certs)
    front = TlsFront(urlsplit(node).port, cert, key).start()
    try:
        spool = tmp_path / "printed"
        agent = start_agent(
            f"wss://localhost:{front.port}/qprint/",
            tenant["token"],
            *("--spooler", "directory", "--spool-dir", str(spool)),
            *("--operations", "socket"),
            env={"SSL_CERT_FILE": str(cert)},
        )
        padding = b"%" + b"x" * INLINE_MAX_BYTES + b"\n"  # a comment after the end
        document = minimal_pdf("over TLS") + padding
        job = submit(node, tenant["key"], tenant["device"], document)
        final = {"PRINTED", "FAILED", "OUTCOME_UNKNOWN", "CANCELLED", "EXPIRED"}
        wait_until(
            lambda: (
                front.cleartext or job_status(node, tenant["key"], job["id"])["status"] in final
            ),
            30,
            message=f"job {job['id']} final; agent log:\n{agent.log()[-3000:]}",
        )
        assert front.cleartext == [], f"sent in the clear: {front.cleartext[0][:400]!r}"
        assert job_status(node, tenant["key"], job["id"])["status"] == "PRINTED"
        assert (spool / f"{job['id']}.pdf").read_bytes() == document
        assert front.tls_connections >= 2  # the socket, and the download with the token
    finally:
        front.stop()


def test_job_is_printed_by_a_real_cups_queue_to_a_pdf(node, tenant, start_agent):
    reason = unavailable_reason()
    if reason:
        if services.required():
            pytest.fail(f"QPRINT_REQUIRE_SERVICES=1 but CUPS cannot run: {reason}")
        pytest.skip(f"CUPS cannot run here: {reason}")
    cups = CupsServer().start()
    try:
        agent = start_agent(
            node,
            tenant["token"],
            "--spooler",
            "cups",
            "--cups-server",
            cups.server,
            "--cups-queue",
            cups.queue,
        )
        job = submit(node, tenant["key"], tenant["device"], minimal_pdf("via CUPS"), "via cups")

        final = wait_final(node, tenant["key"], job["id"], agent)

        assert final["status"] == "PRINTED", (final, cups.log()[-2000:])
        spooled = next(e for e in final["events"] if e["type"] == "SPOOLED")
        assert spooled["detail"]["spool_ref"].startswith(f"{cups.queue}-")
        pdfs = wait_until(cups.pdfs, 10, message="the PDF written by cups-pdf")
        assert len(pdfs) == 1 and pdfs[0].read_bytes().startswith(b"%PDF")
    finally:
        cups.stop()


def test_commands_from_the_application_reach_the_agent_and_their_results_come_back(
    node, tenant, start_agent, tmp_path
):
    from qprint.models import DeviceCommand

    agent = start_agent(
        node, tenant["token"], "--spooler", "directory", "--spool-dir", str(tmp_path / "out")
    )
    headers = {"Authorization": f"Bearer {tenant['key']}"}
    url = node + f"api/v1/devices/{tenant['device']}/commands"
    created = [
        httpx.post(url, headers=headers, json=body, timeout=10)
        for body in ({"type": "REPORT_PRINTERS"}, {"type": "PRINT_TEST_PAGE", "payload": {}})
    ]
    assert [r.status_code for r in created] == [201, 201], [r.text for r in created]

    def finished():
        rows = list(DeviceCommand.objects.order_by("created_at").values_list("status", "result"))
        return all(status in ("DONE", "FAILED") for status, _ in rows) and rows

    rows = wait_until(finished, 30, message=f"command results; agent log:\n{agent.log()[-2000:]}")
    assert [status for status, _ in rows] == ["DONE", "DONE"], rows
    assert rows[0][1]["printers"][0]["name"] == "directory"
    assert rows[1][1]["spool_ref"].endswith(".txt")
