"""The delivery guarantee under faults, end to end, with real processes only.

Three Daphne nodes behind nginx, a ``cluster_runtime`` per node, PostgreSQL, a Redis of the
test's own and 20 simulated devices (one agent process taking pushed assignments; the directory
spooler, or every device printing to one raw ``socket://`` printer). Jobs are submitted
through the application API to all nodes while nodes are SIGKILLed and restarted, Redis is
stopped and restarted, a node is drained from the admin, and one node's wall clock runs five
minutes ahead (libfaketime). Then: every job is final, every PRINTED job was written by the
spooler exactly once, no job was written twice, and OUTCOME_UNKNOWN is counted: the agent process
is SIGKILLed and restarted once too, and only a submission it interrupted may end that way.

Short form by default (240 jobs over 50 s of faults: every kind of fault above, node kills
repeated while the jobs come; about a minute and a half); ``tests/bench/chaos.py --jobs 10000``
runs the long form with the same code (``QPRINT_CHAOS_JOBS``, ``QPRINT_CHAOS_SUBMIT_SECONDS``).
"""

import collections
import hashlib
import json
import os
import threading
import time

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.hashers import PBKDF2PasswordHasher

from qcluster.models import ClusterNode, ClusterSetting
from qprint import api
from qprint.models import Device, PrintJob, PrintJobEvent
from tests.chaos.cluster import (
    LoadBalancer,
    Node,
    Submitter,
    admin_drain,
    fleet_args,
    skewed_clock_env,
    unavailable_reason,
)
from tests.processes import ManagedProcess, RedisServer
from tests.qprint.agent.cups import minimal_pdf
from tests.qprint.agent.raw import RecordingRawPrinter
from tests.waiting import wait_until

pytestmark = [pytest.mark.services, pytest.mark.slow]

JOBS = int(os.environ.get("QPRINT_CHAOS_JOBS", "240"))
DEVICES = int(os.environ.get("QPRINT_CHAOS_DEVICES", "20"))
SUBMIT_SECONDS = float(os.environ.get("QPRINT_CHAOS_SUBMIT_SECONDS", "50"))
SUBMITTERS = int(os.environ.get("QPRINT_CHAOS_SUBMITTERS", "2"))
FAULT_PAUSE = float(os.environ.get("QPRINT_CHAOS_FAULT_PAUSE", "2"))
FINAL_STATUSES = {"PRINTED", "FAILED", "OUTCOME_UNKNOWN", "CANCELLED", "EXPIRED"}


@pytest.fixture(params=["directory", "raw"], ids=["directory-spooler", "raw-printers"])
def cluster(request, transactional_db, subprocess_env, tmp_path):
    """The cluster and its devices: with the directory spooler, or with every device printing
    to one raw ``socket://`` printer (the agent takes pushed assignments either way)."""
    CLOCK["t0"] = time.monotonic()
    reason = unavailable_reason()
    if reason:
        pytest.fail(f"the chaos test needs nginx, redis-server and libfaketime: {reason}")
    # Fast cluster clock for the test: heartbeat 1 s, a node is LOST after 5 s of silence.
    # (update_or_create: a transactional test before this one flushed the seeded rows.)
    ClusterSetting.objects.update_or_create(key="heartbeat_seconds", defaults={"value": "1"})
    ClusterSetting.objects.update_or_create(key="lost_after_seconds", defaults={"value": "5"})
    # The nodes run the example project's password hashers, not the suite's fast MD5 one.
    operator = get_user_model().objects.create_superuser("operator", "op@example.com")
    hasher = PBKDF2PasswordHasher()
    operator.password = hasher.encode("pw", hasher.salt(), iterations=1000)
    operator.save()
    tokens = [api.create_device("acme", f"dev-{i:02d}")[1] for i in range(DEVICES)]
    tokens_file = tmp_path / "tokens.txt"
    tokens_file.write_text("".join(f"dev-{i:02d} {t}\n" for i, t in enumerate(tokens)))
    _, key = api.create_application_key("acme", "chaos")

    redis = RedisServer().start()
    env = {
        **subprocess_env,
        "REDIS_URL": redis.url,
        "QPRINT_HEARTBEAT_SECONDS": "1",
        "QCLUSTER_DRAIN_GRACE_SECONDS": "2",
    }
    nodes = [
        Node("node-1", env),
        Node("node-2", env),
        Node("node-3", {**env, **skewed_clock_env("+5m")}),
    ]
    lb = LoadBalancer(nodes)
    spool = tmp_path / "printed"
    raw = RecordingRawPrinter() if request.param == "raw" else None
    fleet = ManagedProcess(
        "fleet",
        fleet_args(lb.url, tokens_file, tmp_path / "state", spool, DEVICES, raw and raw.address),
        env,
    )
    started: list = []
    try:
        for node in nodes:
            started.append(node.start())
        started.append(lb.start())
        started.append(fleet.start())
        mark("cluster started")
        yield {"nodes": nodes, "lb": lb, "redis": redis, "fleet": fleet, "spool": spool, "key": key,
               "raw": raw}  # fmt: skip
    finally:
        mark("stopping")
        for thing in reversed(started):
            if isinstance(thing, Node):
                thing.kill()  # as in the test (a node's clean stop is tested elsewhere): quick
            else:
                thing.stop()
        redis.stop()
        if raw is not None:
            raw.close()
        mark("stopped")


def ready_devices() -> int:
    return Device.objects.filter(connection_ready=True).count()


def node_status(node_id: str) -> str | None:
    return ClusterNode.objects.filter(node_id=node_id).values_list("status", flat=True).first()


CLOCK = {"t0": time.monotonic()}


def mark(what: str) -> None:
    """A progress line (shown with ``-s``): where the time of a run goes."""
    print(f"chaos t={time.monotonic() - CLOCK['t0']:6.1f}s {what}", flush=True)


def holding_a_claim(nodes: list[Node]) -> Node:
    """The node that handed out a job now between claim and RECEIVED (its device is claiming
    or downloading): killing it hits the claim/download path; else the next node in turn."""
    by_id = {n.node_id: n for n in nodes}
    for _ in range(40):
        claim_node = (
            PrintJob.objects.filter(status="CLAIMED").values_list("claim_node", flat=True).first()
        )
        if claim_node in by_id:
            return by_id[claim_node]
        time.sleep(0.05)  # polling for a moment with a job in flight, else any node will do
    return nodes[int(time.monotonic()) % len(nodes)]


def restart(node: Node) -> None:
    node.start()
    wait_until(lambda: node_status(node.node_id) == "UP", 30, message=f"{node.node_id} UP")


def test_every_job_is_final_and_printed_exactly_once_under_faults(cluster):
    nodes, redis, fleet = cluster["nodes"], cluster["redis"], cluster["fleet"]
    wait_until(
        lambda: ready_devices() == DEVICES,
        60,
        message=f"{DEVICES} devices ready; fleet log:\n{fleet.log()[-2000:]}",
    )

    mark("devices ready")
    assert "push=True" in fleet.log(), "the devices take pushed assignments"
    submitters = [Submitter(nodes, cluster["key"]) for _ in range(SUBMITTERS)]
    job_ids: list[str] = []

    errors: list[str] = []

    def submit_all(k: int) -> None:
        try:
            submit_share(k)
        except Exception as exc:  # reported by the test, not lost in a thread
            errors.append(f"submitter-{k}: {exc!r}")

    def submit_share(k: int) -> None:
        submitter = submitters[k]
        started = time.monotonic()
        for i in range(k, JOBS, SUBMITTERS):
            job_ids.append(
                submitter.submit(f"dev-{i % DEVICES:02d}", minimal_pdf(f"job {i}"), f"job {i}")
            )
            # Pace the submissions over the fault window (pacing, not waiting for a result).
            ahead = started + SUBMIT_SECONDS * (i + 1) / JOBS - time.monotonic()
            if ahead > 0:
                time.sleep(ahead)

    began = time.monotonic()
    threads = [
        threading.Thread(target=submit_all, args=(k,), name=f"submitter-{k}", daemon=True)
        for k in range(SUBMITTERS)
    ]
    for thread in threads:
        thread.start()
    faults: list[str] = []
    try:
        # The fault schedule. The pauses let traffic run against the broken cluster; every
        # recovery is waited for as a condition.
        round_ = 0
        while any(t.is_alive() for t in threads):
            time.sleep(FAULT_PAUSE)
            victim = holding_a_claim(nodes) if round_ % 2 else nodes[round_ % 3]
            victim.kill()
            faults.append(f"kill {victim.node_id}")
            mark(faults[-1])
            time.sleep(1.5)
            restart(victim)
            mark(f"{victim.node_id} back")
            if round_ == 0:
                redis.stop()
                faults.append("redis stop")
                time.sleep(3)
                redis.start()
                faults.append("redis start")
                mark("redis back")
            if round_ == 2:
                # The agent dies too (all 20 devices at once) and restarts on its journals.
                fleet.kill()
                faults.append("kill agent")
                mark(faults[-1])
                time.sleep(1)
                fleet.start()
            if round_ == 1:
                draining = nodes[1]
                admin_drain(nodes[0].url, "operator", "pw", draining.node_id)
                faults.append(f"drain {draining.node_id}")
                wait_until(
                    lambda d=draining: not d.runtime.alive(), 30, message="drained runtime stopped"
                )
                assert draining.runtime.proc.returncode == 0, draining.runtime.log()[-3000:]
                assert node_status(draining.node_id) == "STOPPED", draining.runtime.log()[-3000:]
                restart(draining)  # the web process stayed up; the runtime marks it UP again
                faults.append(f"back {draining.node_id}")
                mark(faults[-1])
            round_ += 1
    finally:
        for submitter in submitters:
            submitter.stopped = True  # an interrupted run stops submitting
        for thread in threads:
            thread.join()
        for submitter in submitters:
            submitter.close()

    assert not errors, errors
    for node in nodes:  # every process of the cluster survived the faults it was not dealt
        assert node.web.alive(), f"{node.node_id} web died:\n{node.web.log()[-2000:]}"
        assert node.runtime.alive(), f"{node.node_id} runtime died:\n{node.runtime.log()[-2000:]}"
    submitted = time.monotonic() - began
    mark("submitted")
    assert len(job_ids) == JOBS
    assert len(set(job_ids)) == JOBS

    def all_final() -> bool:
        return (
            not PrintJob.objects.filter(id__in=job_ids).exclude(status__in=FINAL_STATUSES).exists()
        )

    def not_final() -> str:
        """At the failure: the jobs still open, their devices' connections, the fleet's log."""
        open_jobs = (
            PrintJob.objects.filter(id__in=job_ids)
            .exclude(status__in=FINAL_STATUSES)
            .select_related("device")[:20]
        )
        lines = [
            f"{job.id} {job.status} device={job.device.name} claim_node={job.claim_node!r} "
            f"attempts={job.attempts} connection={job.device.connection_id} "
            f"node={job.device.connection_node!r} ready={job.device.connection_ready} "
            f"events={[e.type for e in job.events.order_by('recorded_at', 'id')]}"
            for job in open_jobs
        ]
        return (
            "every job final; still open:\n"
            + "\n".join(lines)
            + (f"\nfleet log:\n{fleet.log()[-4000:]}")
        )

    wait_until(all_final, max(180, JOBS / 20), interval=0.5, message=not_final)

    to_final = time.monotonic() - began
    mark("all final")
    jobs = {str(j.id): j for j in PrintJob.objects.filter(id__in=job_ids)}
    statuses = collections.Counter(j.status for j in jobs.values())
    raw = cluster["raw"]
    if raw is None:
        ledger = (cluster["spool"] / "spool-ledger.log").read_text().splitlines()
        writes = collections.Counter(
            line.split()[2] for line in ledger if line.split()[1] == "written"
        )
        refused = [line for line in ledger if line.split()[1] != "written"]
    else:  # what reached the printer, by document (each job's document is distinct)
        delivered = raw.deliveries_by_sha256()
        writes = collections.Counter({j: delivered[job.sha256] for j, job in jobs.items()})
        refused = []
        known = {job.sha256 for job in jobs.values()} | {hashlib.sha256(b"").hexdigest()}
        stray = sum(n for digest, n in delivered.items() if digest not in known)
        # Bytes that are no whole document: only a submission a kill cut short sends them.
        assert stray <= statuses.get("OUTCOME_UNKNOWN", 0), (stray, dict(statuses))
    report = {
        "jobs": JOBS,
        "devices": DEVICES,
        "statuses": dict(statuses),
        "outcome_unknown": statuses.get("OUTCOME_UNKNOWN", 0),
        "faults": faults,
        "submit_retries": sum(s.retries for s in submitters),
        "seconds_submitting": round(submitted, 1),
        "seconds_until_all_final": round(to_final, 1),
    }
    print("chaos_report " + json.dumps(report))
    if os.environ.get("QPRINT_CHAOS_REPORT"):
        with open(os.environ["QPRINT_CHAOS_REPORT"], "w") as f:
            json.dump(report, f)

    assert refused == [], "a document was submitted twice to the spooler"
    assert max(writes.values(), default=0) <= 1, "a job was written twice"
    for job_id, job in jobs.items():
        if job.status == "PRINTED":
            assert writes[job_id] == 1, f"PRINTED job {job_id} was not written exactly once"
            if raw is None:
                data = (cluster["spool"] / f"{job_id}.pdf").read_bytes()
                assert hashlib.sha256(data).hexdigest() == job.sha256
        elif job.status == "OUTCOME_UNKNOWN":
            # Only a kill of the agent during a submission explains it; written at most once.
            reasons = [
                e.detail.get("reason")
                for e in PrintJobEvent.objects.filter(job_id=job.id, type="OUTCOME_UNKNOWN")
            ]
            assert reasons == ["interrupted_submission"], (job_id, reasons)
        else:
            assert writes[job_id] == 0, f"{job.status} job {job_id} was written"
    agent_kills = faults.count("kill agent")
    # One submission at a time per device: each agent kill interrupts at most one per device.
    assert statuses.get("OUTCOME_UNKNOWN", 0) <= agent_kills * DEVICES, report
    assert set(statuses) <= {"PRINTED", "OUTCOME_UNKNOWN"}, report
    assert len(faults) >= 6, faults
