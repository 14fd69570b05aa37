"""A real Prometheus (Debian's ``prometheus``) scrapes two live nodes and sees what docs/ promise.

Two Daphne nodes of the example project with their ``cluster_runtime`` sidecars (same node id),
on PostgreSQL and a Redis of the test's own; Prometheus on loopback scrapes both ``/metrics``
every second and evaluates the shipped alerting rules (docs/deploy/prometheus/alerts.yml). Real
devices connect, jobs are submitted, claimed and printed over the real API; every check is a
PromQL query through Prometheus's HTTP API, waited for with a deadline.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from channels.db import database_sync_to_async

from qprint import api
from tests import services as service_discovery
from tests.processes import (
    REPO_ROOT,
    ManagedProcess,
    RedisServer,
    free_port,
    manage,
    port_open,
    wait_for_other_sessions_to_end,
)
from tests.qcluster.conftest import set_cluster_settings
from tests.qprint.realtime.cluster import Http, Node, RealDevice, database_url_of, node_env
from tests.waiting import eventually, wait_until

pytestmark = [pytest.mark.services, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

RULES = REPO_ROOT / "docs" / "deploy" / "prometheus" / "alerts.yml"
DEADLINE = 30


def prometheus_binary() -> str:
    binary = shutil.which("prometheus")
    if binary is None:
        reason = "no prometheus binary (Debian package 'prometheus')"
        if service_discovery.required():  # CI installs it: a missing server is a failure there
            pytest.fail(reason)
        pytest.skip(reason)
    return binary


class Prometheus:
    """A Prometheus server on a spare loopback port with a data directory of its own."""

    def __init__(self, binary: str, targets: list[str], workdir: Path):
        self.port = free_port()
        config = workdir / "prometheus.yml"
        config.write_text(
            json.dumps(
                {
                    "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                    "rule_files": [str(RULES)],
                    "scrape_configs": [
                        {
                            "job_name": "qprint",
                            "metrics_path": "/metrics",
                            "scrape_timeout": "1s",
                            "static_configs": [{"targets": targets}],
                        }
                    ],
                }
            )
        )
        self.process = ManagedProcess(
            "prometheus",
            [
                binary,
                f"--config.file={config}",
                f"--storage.tsdb.path={workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
            ],
            {"PATH": "/usr/bin:/bin"},
            cwd=workdir,
        )
        self.url = f"http://127.0.0.1:{self.port}"

    def start(self) -> Prometheus:
        self.process.start()
        wait_until(
            lambda: port_open(self.port) or not self.process.alive(),
            DEADLINE,
            message="prometheus listening",
        )
        assert self.process.alive(), self.process.log()
        # Listening is not ready: the query API answers 503 until the TSDB is open.
        wait_until(
            lambda: httpx.get(f"{self.url}/-/ready", timeout=2).status_code == 200,
            DEADLINE,
            message="prometheus ready",
        )
        return self

    async def query(self, expr: str) -> float | None:
        """The value of an instant query that yields one sample (None: no sample)."""
        answer = await self._get("/api/v1/query", params={"query": expr})
        assert answer["status"] == "success", answer
        result = answer["data"]["result"]
        assert len(result) <= 1, f"{expr} gave {len(result)} series: {result}"
        return float(result[0]["value"][1]) if result else None

    async def until(self, *conditions: tuple[str, Callable[[float], bool]]) -> None:
        """Wait until every ``check(value of expr)`` holds in one round of queries; fail with the
        last value of each that did not after :data:`DEADLINE`.

        The conditions of one phase of the test are awaited together: what its traffic moved
        shows in the same scrape, so a phase costs about one scrape interval, not one per series.
        """
        last: dict[str, float | None] = {}

        def holds(expr: str, check: Callable[[float], bool]) -> bool:
            value = last.get(expr)
            return value is not None and check(value)

        async def hold() -> bool:
            values = await asyncio.gather(*(self.query(expr) for expr, _ in conditions))
            last.update((expr, value) for (expr, _), value in zip(conditions, values, strict=True))
            return all(holds(expr, check) for expr, check in conditions)

        def waiting_for() -> str:
            pending = [
                f"{expr} (last {last.get(expr)})"
                for expr, check in conditions
                if not holds(expr, check)
            ]
            return "; ".join(pending) + f"\n{self.process.log()[-3000:]}"

        await eventually(hold, DEADLINE, waiting_for, interval=0.2)

    async def series(self, expr: str) -> list[dict]:
        """Every series an instant query yields (fails on a query Prometheus refuses)."""
        answer = await self._get("/api/v1/query", params={"query": expr})
        assert answer["status"] == "success", (expr, answer)
        return answer["data"]["result"]

    async def alert_states(self) -> dict[str, str]:
        answer = await self._get("/api/v1/alerts")
        return {a["labels"]["alertname"]: a["state"] for a in answer["data"]["alerts"]}

    async def _get(self, path: str, **kwargs) -> dict:
        async with httpx.AsyncClient(base_url=self.url, timeout=10) as client:
            return (await client.get(path, **kwargs)).json()


def at_least(n: float):
    return lambda value: value >= n


def equal(n: float):
    return lambda value: value == n


@pytest.fixture
def cluster(transactional_db, django_db_blocker, tmp_path):
    """Redis, two nodes with their sidecars, and Prometheus scraping them."""
    from django.db import connection

    binary = prometheus_binary()
    set_cluster_settings(heartbeat_seconds=1, lost_after_seconds=3, alert_on_lost=True)
    database_url = database_url_of(connection.settings_dict)
    redis = RedisServer().start()
    started: list = [redis]
    try:
        nodes, targets = [], []
        for node_id in ("node-a", "node-b"):
            # With psycopg's pool, as docs/deploy/kubernetes/configmap.yaml runs the nodes; the
            # database's figures read at every scrape (5 s by default), so that a phase of the
            # test waits one scrape for what it moved.
            env = node_env(
                database_url, redis.url, node_id, DATABASE_POOL="on", METRICS_CACHE_SECONDS="0"
            )
            nodes.append(Node(node_id, env).start())
            # The sidecar serves its own figures, as in docs/deploy/kubernetes/deployment.yaml.
            port = free_port()
            command = ["--metrics-port", str(port), "--metrics-bind", "127.0.0.1"]
            runtime = ManagedProcess(
                f"runtime-{node_id}", manage("cluster_runtime", *command), env
            ).start()
            started += [nodes[-1], runtime]
            targets += [f"127.0.0.1:{nodes[-1].port}", f"127.0.0.1:{port}"]
        extra = ManagedProcess(
            "runtime-node-c",
            manage("cluster_runtime"),
            node_env(database_url, redis.url, "node-c"),
        )
        started.append(extra)
        prometheus = Prometheus(binary, targets, tmp_path)
        started.append(prometheus.process)
        prometheus.start()
        yield nodes, extra, redis, prometheus
    finally:
        for process in reversed(started):
            process.stop()
        wait_for_other_sessions_to_end(django_db_blocker)


async def event(http: Http, node: Node, token: str, job_id: str, body: dict) -> httpx.Response:
    return await http.client.post(
        f"{node.http}/qprint/api/v1/device/jobs/{job_id}/events",
        headers={"Authorization": f"Bearer {token}"},
        json=body,
    )


async def test_prometheus_scrapes_both_nodes_and_sees_the_promised_series_move(cluster):
    (a, b), extra, redis, prom = cluster
    adb = database_sync_to_async
    _, app_key = await adb(api.create_application_key)("acme", "backend")
    http = Http(app_key)
    _, token = await adb(api.create_device)("acme", "desk-1")
    _, idle_token = await adb(api.create_device)("acme", "desk-idle")
    _, offline_token = await adb(api.create_device)("acme", "desk-offline")
    real, idle = RealDevice(token), RealDevice(idle_token)
    try:
        # Four targets up (two web processes, two sidecars); the cluster as the sidecars
        # registered it. Each process exports its own figures, the sidecars' included.
        await prom.until(
            ('sum(up{job="qprint"})', equal(4)),
            ('count(qprint_webhook_attempts_total{outcome="delivered"})', equal(4)),
            ('max(qcluster_nodes{status="UP"})', equal(2)),
            ('max(qcluster_lease_held{lease="cluster-sweeper"})', equal(1)),
        )

        # Connections per node: from the rows (any node answers) and the sockets of the process.
        await real.connect(b.ws)
        await idle.connect(a.ws)
        await prom.until(
            ('max(qprint_device_connections{node="node-b"})', equal(1)),
            ('max(qprint_device_connections{node="node-a"})', equal(1)),
            ('sum(qprint_sockets_open{node="node-b"})', equal(1)),
            ('max(qcluster_node_connections{node="node-b"})', equal(1)),
        )

        # A job submitted on A wakes the device on B: published on A, delivered and timed on B.
        submitted = await http.submit(a, "desk-1", "first")
        assert submitted.status_code == 201, submitted.text
        job = submitted.json()
        await real.frame("wake")
        await prom.until(
            ('sum(qprint_wakeups_published_total{node="node-a"})', at_least(1)),
            ('sum(qprint_wakeups_delivered_total{node="node-b"})', at_least(1)),
            ('sum(qprint_wake_latency_seconds_count{node="node-b"})', at_least(1)),
            ('max(qprint_jobs{status="QUEUED"})', equal(1)),
            ("max(qprint_oldest_queued_job_age_seconds)", lambda v: v > 0),
            # The device does not claim yet: its pings find the queued job (heartbeat
            # reconciles).
            (
                'sum(qprint_heartbeat_reconciles_total{found_work="true",node="node-b"})',
                at_least(1),
            ),
            ('sum(qprint_heartbeat_reconciles_total{found_work="false"})', at_least(1)),
        )

        # Claims by answer: an assignment, nothing for the idle device, a refusal offline.
        claimed = await http.claim(a, token)
        assert claimed.status_code == 200, claimed.text
        claim_id = claimed.json()["claim_id"]
        assert (await http.claim(b, idle_token)).status_code == 204
        refused = await http.claim(b, offline_token)
        assert (refused.status_code, refused.json()["error"]) == (409, "not_connected")
        await prom.until(
            ('sum(qprint_claims_total{answer="assignment",status="200"})', equal(1)),
            ('sum(qprint_claims_total{answer="nothing",status="204"})', equal(1)),
            ('sum(qprint_claims_total{answer="not_connected"})', equal(1)),
            ("sum(qprint_claim_duration_seconds_count)", equal(3)),
        )

        # Events by answer: created, replayed, stale claim (409) and malformed (422).
        received = {
            "event_id": str(uuid.uuid4()),
            "type": "RECEIVED",
            "claim_id": claim_id,
            "occurred_at": datetime.now(UTC).isoformat(),
        }
        assert (await event(http, b, token, job["id"], received)).status_code == 201
        assert (await event(http, a, token, job["id"], received)).status_code == 200
        stale = {**received, "event_id": str(uuid.uuid4()), "claim_id": str(uuid.uuid4())}
        assert (await event(http, a, token, job["id"], stale)).status_code == 409
        assert (await event(http, a, token, job["id"], {"type": "NOPE"})).status_code == 422
        printed = await http.event(a, token, job["id"], claim_id, "PRINTED")
        assert printed.status_code == 201, printed.text
        await prom.until(
            ('sum(qprint_events_total{status="201",answer="created"})', equal(2)),
            ('sum(qprint_events_total{status="200",answer="replayed"})', equal(1)),
            ('sum(qprint_events_total{status="409",answer="stale_claim"})', equal(1)),
            ('sum(qprint_events_total{status="422"})', equal(1)),
            ("sum(qprint_event_duration_seconds_count)", equal(5)),
            # Jobs by state and the submit -> PRINTED histogram (observed on A, which recorded
            # it).
            ('max(qprint_jobs{status="PRINTED"})', equal(1)),
            ('max(qprint_jobs{status="QUEUED"})', equal(0)),
            ('sum(qprint_job_submit_to_printed_seconds_count{node="node-a"})', equal(1)),
            ('sum(qprint_job_submit_to_printed_seconds_bucket{le="+Inf"})', equal(1)),
            ('sum(qprint_jobs_finished_total{status="PRINTED"})', equal(1)),
        )

        # A node that dies: LOST, an alert row, and the shipped rule fires in Prometheus.
        extra.start()
        await prom.until(('max(qcluster_nodes{status="UP"})', equal(3)))
        extra.kill()
        await prom.until(
            ('max(qcluster_nodes{status="LOST"})', equal(1)),
            ('max(qcluster_alerts_open{code="cluster.node.lost"})', equal(1)),
        )
        states: list[dict] = [{}]

        async def lost_fires() -> bool:
            states[0] = await prom.alert_states()
            return states[0].get("QClusterNodeLost") == "firing"

        await eventually(lost_fires, DEADLINE, lambda: f"QClusterNodeLost firing: {states[0]}")

        # Redis down: the wakeup of a job for the device on A is dropped (layer error), counted.
        redis.stop()
        assert (await http.submit(a, "desk-idle", "no-bus")).status_code == 201
        await prom.until(
            ('sum(qprint_wakeups_dropped_total{cause="layer_error",node="node-a"})', at_least(1)),
            ('sum(qprint_wakeups_dropped_total{cause="queue_full"})', equal(0)),
        )

        # Every query of the shipped dashboard is valid PromQL and, after this traffic, answers.
        from tests.ops.test_deploy import dashboard_queries

        empty = [expr for expr in dashboard_queries() if not await prom.series(expr)]
        assert not empty, f"dashboard queries without data: {empty}"
    finally:
        await real.close()
        await idle.close()
        await http.close()
        from qprint.models import Device

        await adb(wait_until)(
            lambda: not Device.objects.filter(connection_id__isnull=False).exists(),
            20,
            message="nodes closed every socket",
        )
