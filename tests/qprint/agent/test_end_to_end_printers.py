"""The agent process with printers by URI against a real Daphne node: the printers and their
capabilities reach the device summary, a raw job is printed byte for byte, and an agent whose
journal was lost while a job was RECEIVED reports it OUTCOME_UNKNOWN after reconnecting (hello's
``active_jobs``) without sending it to the printer again."""

# ruff: noqa: F401, F811  - the fixtures of test_end_to_end are imported, then named as arguments

import shutil
import socket
import threading

import httpx
import pytest

from tests.qprint.agent.raw import StallingPrinter, submit_raw
from tests.qprint.agent.test_end_to_end import job_status, node, start_agent, tenant, wait_final
from tests.waiting import wait_until

pytestmark = [pytest.mark.services, pytest.mark.slow]


class RecordingPrinter:
    def __init__(self):
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.jobs: list[bytes] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            data = bytearray()
            with conn:
                while chunk := conn.recv(65536):
                    data += chunk
            self.jobs.append(bytes(data))


def test_raw_printer_by_uri_prints_the_bytes_and_reports_its_capabilities(
    node,
    tenant,
    start_agent,
):
    printer = RecordingPrinter()
    agent = start_agent(
        node,
        tenant["token"],
        "--printer",
        f"labels=socket://127.0.0.1:{printer.port}",
        "--printer",
        "void=null:",
        "--default-printer",
        "labels",
    )
    auth = {"Authorization": f"Bearer {tenant['key']}"}
    summary = wait_until(
        lambda: (
            (s := httpx.get(node + f"api/v1/devices/{tenant['device']}", headers=auth).json())[
                "printers"
            ]
            and s
        ),
        30,
        message=f"printers reported; agent log:\n{agent.log()[-2000:]}",
    )
    labels = next(p for p in summary["printers"] if p["name"] == "labels")
    assert labels["is_default"] is True
    assert labels["capabilities"]["copies_max"] == 1

    refused = submit_raw(node, tenant["key"], tenant["device"], b"^XA^XZ", options={"copies": 3})
    assert refused.status_code == 422, refused.text
    assert refused.json()["error"] == "unsupported_option"
    assert "option 'copies'" in refused.json()["message"]

    document = b"^XA^FO50,50^A0N,50,50^FDqprint^FS^XZ" + bytes(range(256))
    response = submit_raw(node, tenant["key"], tenant["device"], document)
    assert response.status_code == 201, response.text
    final = wait_final(node, tenant["key"], response.json()["id"], agent)
    assert final["status"] == "PRINTED", final
    assert printer.jobs == [document]
    printer.server.close()


def test_a_lost_journal_makes_a_received_job_outcome_unknown_and_nothing_is_printed_again(
    node,
    tenant,
    start_agent,
    tmp_path,
):
    printer = StallingPrinter()
    uri = f"labels=socket://127.0.0.1:{printer.port}"
    agent = start_agent(node, tenant["token"], "--printer", uri, "--socket-write-timeout", "120")
    response = submit_raw(node, tenant["key"], tenant["device"], b"\0" * (16 * 1024 * 1024))
    assert response.status_code == 201, response.text
    job_id = response.json()["id"]
    wait_until(printer.first_bytes.is_set, 30, message=f"bytes sent; log:\n{agent.log()[-2000:]}")
    assert job_status(node, tenant["key"], job_id)["status"] == "RECEIVED"

    agent.kill()  # the agent dies mid-document, and its disk with it
    shutil.rmtree(tmp_path / "state")
    agent = start_agent(node, tenant["token"], "--printer", uri)

    final = wait_final(node, tenant["key"], job_id, agent)
    assert final["status"] == "OUTCOME_UNKNOWN", final
    assert final["events"][-1]["detail"] == {"reason": "no_journal_record"}
    assert printer.connections == 1
    printer.close()
