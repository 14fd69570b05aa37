"""CloudPRNT printers against real nodes: Daphne processes of the example project with their
``cluster_runtime``, PostgreSQL, a Redis of the test's own, and nginx in front for the fault test.

- the poll on node A, the GET on node B, the confirmation on node C: one print, each state once;
- pause/resume, cancel, expiry, the unconfirmed sweep, webhooks and ``?wait`` for a CloudPRNT
  job, the application talking to one node while the printer talks to others;
- three nodes behind nginx, printers polling through it, the node serving them SIGKILLed mid-run:
  every job ends final, none is printed twice, only a job whose confirmation was lost may end
  OUTCOME_UNKNOWN.
"""

from __future__ import annotations

import base64
import collections
import hashlib
import threading
import time

import httpx
import pytest

from qcluster.models import ClusterSetting
from qprint import api
from qprint.models import PrintJob, PrintJobEvent
from tests.chaos.cluster import LoadBalancer, Node, unavailable_reason
from tests.processes import RedisServer
from tests.qprint.cloudprnt.simulator import StarPrinter, over_http
from tests.qprint.webhooks.receiver import Receiver
from tests.waiting import wait_until

pytestmark = [pytest.mark.services, pytest.mark.slow]

FINAL = {"PRINTED", "FAILED", "OUTCOME_UNKNOWN", "CANCELLED", "EXPIRED"}


@pytest.fixture
def nodes(transactional_db, subprocess_env):
    ClusterSetting.objects.update_or_create(key="heartbeat_seconds", defaults={"value": "1"})
    ClusterSetting.objects.update_or_create(key="lost_after_seconds", defaults={"value": "5"})
    redis = RedisServer().start()
    env = {
        **subprocess_env,
        "REDIS_URL": redis.url,
        "QPRINT_HEARTBEAT_SECONDS": "1",
        "QPRINT_CLOUDPRNT_CONFIRM_SECONDS": "1",
        "QPRINT_EXPIRY_SECONDS": "1",
        "QPRINT_WEBHOOK_ALLOW_HTTP": "1",
        "QPRINT_WEBHOOK_ALLOWED_HOSTS": "127.0.0.1",
    }
    started = [Node(f"node-{n}", env) for n in (1, 2, 3)]
    try:
        for node in started:
            node.start()
        yield started
    finally:
        for node in started:
            node.kill()
        redis.stop()


def printer_on(client: httpx.Client, node_url: str, name: str, token: str, **kw) -> StarPrinter:
    return StarPrinter(over_http(client, node_url + "cloudprnt/"), name, token, **kw)


def submit_over_http(client, node, key, content, content_type, **fields):
    response = client.post(
        node.url + "api/v1/jobs",
        json={
            "device": "counter",
            "content_type": content_type,
            "content_base64": base64.b64encode(content).decode(),
            **fields,
        },
        headers={"Authorization": f"Bearer {key}"},
    )
    assert response.status_code == 201, response.text
    return response.json()


def test_poll_on_one_node_get_on_another_confirm_on_a_third(nodes):
    a, b, c = nodes
    _, token = api.create_device("acme", "counter", kind="cloudprnt")
    _, key = api.create_application_key("acme", "shop")
    receiver = Receiver().start()
    with httpx.Client(timeout=10) as client:
        made = client.post(
            a.url + "api/v1/webhooks",
            json={"url": receiver.url},
            headers={"Authorization": f"Bearer {key}"},
        )
        assert made.status_code == 201, made.text
        receiver.secrets.append(made.json()["secret"])
        job = submit_over_http(client, c, key, b"receipt", "text/plain", options={"cut": "full"})

        # ?wait on node C while the printer works on A and B.
        waited: dict = {}

        def wait_for_change() -> None:
            waited["job"] = client.get(
                c.url + f"api/v1/jobs/{job['id']}?wait=20&status=QUEUED",
                headers={"Authorization": f"Bearer {key}"},
            ).json()

        waiter = threading.Thread(target=wait_for_change)
        waiter.start()

        on_a = printer_on(client, a.url, "counter", token, supports=("text/plain",))
        answer = on_a.poll()
        assert answer["jobReady"] is True, answer
        assert answer["mediaTypes"] == ["text/plain"]
        waiter.join(25)
        assert waited["job"]["status"] == "CLAIMED"

        on_b = printer_on(client, b.url, "counter", token)
        fetched = on_b.fetch(answer["jobToken"], "text/plain")
        assert fetched.status == 200 and fetched.body == b"receipt"
        assert fetched.headers["x-star-cut"] == "full; feed=true"
        assert on_b.fetch(answer["jobToken"], "text/plain").body == b"receipt"  # again: same

        on_c = printer_on(client, c.url, "counter", token)
        assert on_c.confirm(answer["jobToken"]).json() == {"status": "PRINTED", "recorded": True}

    types = list(
        PrintJobEvent.objects.filter(job_id=job["id"])
        .order_by("recorded_at", "id")
        .values_list("type", flat=True)
    )
    assert types == ["QUEUED", "CLAIMED", "RECEIVED", "PRINTED"]
    wait_until(
        lambda: (
            {"job.claimed", "job.received", "job.printed", "device.connected"}
            <= {r.json["type"] for r in receiver.ok()}
        ),
        30,
        message="the webhooks of the job and of the printer",
    )
    receiver.stop()


def test_pause_cancel_expiry_and_the_unconfirmed_sweep_on_real_nodes(nodes):
    a, b, _ = nodes
    device, token = api.create_device("acme", "counter", kind="cloudprnt")
    with httpx.Client(timeout=10) as client:
        printer = printer_on(client, a.url, "counter", token, supports=("text/plain",))
        # Pause: no job is offered; resume: it is.
        api.pause_device(device)
        paused = api.submit_job("acme", "counter", b"one", "text/plain")[0]
        assert printer.poll()["jobReady"] is False
        api.resume_device(device)
        answer = printer.poll()
        assert answer["jobReady"] is True

        # Cancel while CLAIMED: the GET finds nothing, the next poll offers nothing.
        api.cancel_job(PrintJob.objects.get(pk=paused.pk))
        assert printer.fetch(answer["jobToken"], "text/plain").status == 404
        assert printer.poll()["jobReady"] is False

        # Expiry: a job past its expires_at is not offered, and the expiry task ends it.
        expiring = api.submit_job("acme", "counter", b"late", "text/plain", expires_in=1)[0]
        wait_until(
            lambda: PrintJob.objects.get(pk=expiring.pk).status == "EXPIRED",
            60,
            message="the expiry task (cluster_runtime) ended the job",
        )
        assert printer.poll()["jobReady"] is False

        # A fetched job never confirmed ends OUTCOME_UNKNOWN (confirm timeout 1 s here).
        lost = api.submit_job("acme", "counter", b"lost", "text/plain")[0]
        printer_b = printer_on(client, b.url, "counter", token, supports=("text/plain",))
        assert printer_b.print_next(confirm=False) is not None
        wait_until(
            lambda: PrintJob.objects.get(pk=lost.pk).status == "OUTCOME_UNKNOWN",
            60,
            message="the unconfirmed sweep ended the job",
        )
        assert printer.poll()["jobReady"] is False


def test_printers_behind_nginx_survive_a_node_killed_mid_run(nodes):
    if unavailable_reason():
        pytest.fail(f"needs nginx: {unavailable_reason()}")
    lb = LoadBalancer(nodes).start()
    printers_count, jobs_each = 4, 12
    tokens = {
        f"p{n}": api.create_device("acme", f"p{n}", kind="cloudprnt")[1]
        for n in range(printers_count)
    }
    jobs = [
        api.submit_job("acme", name, f"{name}-{i}".encode(), "text/plain")[0]
        for name in tokens
        for i in range(jobs_each)
    ]
    printed: collections.Counter = collections.Counter()
    stop = threading.Event()
    errors: list[str] = []

    def run(name: str, token: str, mac: str) -> None:
        with httpx.Client(timeout=5) as client:
            printer = StarPrinter(
                over_http(client, lb.url + "cloudprnt/"),
                name,
                token,
                mac=mac,
                supports=("text/plain",),
            )
            while not stop.is_set():
                try:
                    answer = printer.poll()
                except (httpx.HTTPError, AssertionError) as exc:
                    errors.append(repr(exc)[:200])
                    time.sleep(0.2)  # the printer polls again at its next interval
                    continue
                if not answer.get("jobReady"):
                    time.sleep(0.1)
                    continue
                try:
                    reply = printer.fetch(answer["jobToken"], "text/plain")
                except httpx.HTTPError as exc:
                    errors.append(repr(exc)[:200])
                    continue
                if reply.status != 200:
                    continue
                printed[reply.body] += 1
                for _attempt in range(3):  # a printer retries its confirmation
                    try:
                        if printer.confirm(answer["jobToken"]).status == 200:
                            break
                    except httpx.HTTPError as exc:
                        errors.append(repr(exc)[:200])

    threads = [
        threading.Thread(target=run, args=(name, token, f"00:11:62:00:00:{n:02x}"))
        for n, (name, token) in enumerate(tokens.items())
    ]
    try:
        for thread in threads:
            thread.start()
        wait_until(
            lambda: PrintJob.objects.filter(status="PRINTED").count() >= len(jobs) // 3,
            60,
            message="a third of the jobs printed",
        )
        victim = next(n for n in nodes if PrintJob.objects.filter(claim_node=n.node_id).exists())
        victim.kill()
        wait_until(
            lambda: PrintJob.objects.filter(status__in=FINAL).count() == len(jobs),
            120,
            message="every job final after the node died",
        )
    finally:
        stop.set()
        for thread in threads:
            thread.join(15)
        lb.stop()
    statuses = collections.Counter(PrintJob.objects.values_list("status", flat=True))
    assert set(statuses) <= {"PRINTED", "OUTCOME_UNKNOWN"}, statuses
    assert printed and max(printed.values()) == 1, [k for k, v in printed.items() if v > 1]
    # Every PRINTED job's document was fetched (the printer printed it), and once only (above).
    fetched = {hashlib.sha256(body).hexdigest() for body in printed}
    assert {job.sha256 for job in PrintJob.objects.filter(status="PRINTED")} <= fetched
    assert statuses["OUTCOME_UNKNOWN"] <= 3, statuses  # only confirmations lost with the node
