"""Round trips of the job path on PostgreSQL, as docs/PERFORMANCE.md says: a claim (its replay,
an empty claim, a refusal) is one statement with no transaction of its own, over HTTP too, the
device's token matched in its lock; a submission is two statements (BEGIN and COMMIT aside); a new
device event is one statement with no transaction of its own, its replay a transaction; a socket's
upgrade takes the connection record in one statement, the token matched in it."""

import re
import uuid

import pytest
from django.db import IntegrityError, connection, transaction
from django.db.models import F
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from qprint import api
from qprint.core import executor
from qprint.core.errors import QPrintError, Unauthorized
from qprint.domain import claim, credentials, events
from qprint.domain.claim import claim_next_job
from qprint.domain.device_operations import open_socket, pushed_claim
from qprint.domain.events import record_device_event, server_event_fingerprint
from qprint.models import (
    AuthFailureCount,
    Device,
    PrintJob,
    PrintJobEvent,
    WebhookDelivery,
    WebhookEndpoint,
)
from tests.qprint.helpers import (
    PDF,
    connect,
    documents_in_a_storage,
    event,
    make_device,
    recording_wakeups,
    submit,
)

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]


@pytest.fixture(autouse=True)
def postgresql_only():
    if connection.vendor != "postgresql":
        pytest.skip("the one-statement forms are PostgreSQL's (SQLite runs step by step)")
    # Which way an event tries first, remembered of an earlier test's device with webhooks.
    events._ANNOUNCING.clear()


def statements(func):
    """``func()``'s result and every statement it sent (BEGIN and COMMIT are not statements here).
    Nothing is left out: whether the tenant has webhook endpoints and what the printer reported
    are read in the statements of the job path itself (a tenant without endpoints here)."""
    with CaptureQueriesContext(connection) as captured:
        result = func()
    return result, [
        q["sql"] for q in captured.captured_queries if q["sql"] not in ("BEGIN", "COMMIT")
    ]


def round_trips(func):
    """``func()``'s result and every round trip it made, BEGIN and COMMIT included."""
    with CaptureQueriesContext(connection) as captured:
        result = func()
    return result, [q["sql"] for q in captured.captured_queries]


def test_a_claim_that_hands_out_a_job_is_one_round_trip():
    """The lock, the gate, the claim and its event in one statement, committed by itself: no
    BEGIN or COMMIT. The event's fingerprint, computed by the statement, is the one the server
    gives its events."""
    device = connect(make_device().device)
    job = submit(device)
    assignment, sent = round_trips(lambda: claim_next_job(device.pk, node="node-a"))
    assert assignment is not None and assignment.job_id == job.pk
    assert len(sent) == 1 and sent[0].lstrip().startswith("WITH gate AS"), sent
    assert "FOR NO KEY UPDATE" in sent[0]
    job.refresh_from_db()
    assert job.status == "CLAIMED" and job.claim_id == assignment.claim_id
    assert (job.claim_node, job.attempts) == ("node-a", 1)
    claimed = PrintJobEvent.objects.get(job=job, type="CLAIMED", source="SERVER")
    detail = {"claim_id": str(assignment.claim_id), "node": "node-a"}
    assert claimed.detail == detail
    assert claimed.fingerprint == server_event_fingerprint(job.pk, "CLAIMED", "", detail)


def test_a_pushed_claim_reads_a_small_document_in_its_own_statement():
    device = connect(make_device().device)
    small, large = submit(device, b"%PDF-1.4 small", priority=1), submit(device, PDF * 50)
    token_hash = device.token_hash
    pushed, sent = round_trips(
        lambda: pushed_claim(device.pk, str, token_hash=token_hash, inline_max=100)
    )
    body, document = pushed
    assert body["job_id"] == str(small.pk) and document == b"%PDF-1.4 small"
    assert len(sent) == 1, sent  # the lock, the claim with the document: no read of its own
    replayed, sent = round_trips(
        lambda: pushed_claim(device.pk, str, token_hash=token_hash, inline_max=100)
    )
    assert replayed == pushed and len(sent) == 1, sent  # the held job's, the same way

    api.cancel_job(small.pk, tenant=device.tenant)
    (body, document), sent = round_trips(
        lambda: pushed_claim(device.pk, str, token_hash=token_hash, inline_max=100)
    )
    assert body["job_id"] == str(large.pk) and body["size"] > 100
    assert document is None and len(sent) == 1, sent  # larger: the device downloads it


def test_a_pushed_claim_reads_a_document_kept_elsewhere_after_the_claim(settings, tmp_path):
    documents_in_a_storage(settings, tmp_path)
    device = connect(make_device().device)
    submit(device)
    (_, document), sent = round_trips(
        lambda: pushed_claim(device.pk, str, token_hash=device.token_hash, inline_max=100)
    )
    assert document == PDF and len(sent) == 1, sent  # the file, read after: no statement


def test_replayed_and_empty_claims_are_one_round_trip():
    device = connect(make_device().device)
    submit(device)
    first = claim_next_job(device.pk)
    again, sent = round_trips(lambda: claim_next_job(device.pk))
    assert again == first and len(sent) == 1, sent

    idle = connect(make_device(name="idle").device)
    nothing, sent = round_trips(lambda: claim_next_job(idle.pk))
    assert nothing is None and len(sent) == 1, sent


def test_a_refused_claim_is_answered_from_the_row_its_statement_locked():
    """The gate's refusal and the token's are told from the row the one statement returned, in
    the gate's order; nothing is claimed."""
    device = connect(make_device().device)
    submit(device)
    Device.objects.filter(pk=device.pk).update(
        paused=True, control_revision=F("control_revision") + 1
    )

    def refusal(**kwargs):
        with CaptureQueriesContext(connection) as captured, pytest.raises(QPrintError) as error:
            claim_next_job(device.pk, **kwargs)
        assert len(captured.captured_queries) == 1, captured.captured_queries
        return error.value

    assert refusal().code == "stale_control"
    Device.objects.filter(pk=device.pk).update(control_applied_revision=F("control_revision"))
    assert refusal().code == "paused"
    assert isinstance(refusal(token_hash="0" * 64), Unauthorized)
    assert PrintJob.objects.get(device=device).status == "QUEUED"


def test_a_claim_in_a_transaction_of_the_callers_is_one_statement_in_a_savepoint():
    device = connect(make_device().device)
    job = submit(device)
    with transaction.atomic():
        assignment, sent = round_trips(lambda: claim_next_job(device.pk))
    assert assignment.job_id == job.pk
    assert [q.split()[0] for q in sent] == ["SAVEPOINT", "WITH", "RELEASE"], sent


def test_the_transactions_way_skips_a_candidate_lost_meanwhile_in_one_more_round():
    """A device the one statement does not serve (its tenant has webhooks, remembered here)
    claims in a transaction: the lock, then the claim; a candidate read with the lock and lost
    before the claim (cancelled by another node) costs one more round."""
    device = connect(make_device().device)
    lost, kept = submit(device, priority=5), submit(device)
    events.remember_announcing(device.pk)

    real = claim._claim_in_one_statement

    def cancel_first(*args):
        PrintJob.objects.filter(pk=lost.pk).update(status="CANCELLED")
        return real(*args)

    claim._claim_in_one_statement = cancel_first
    try:
        assignment, sent = statements(lambda: claim_next_job(device.pk))
    finally:
        claim._claim_in_one_statement = real
    assert assignment.job_id == kept.pk
    assert len(sent) == 5, sent  # lock, lost claim, next candidate, claim (+ the test's UPDATE)


def test_a_device_event_is_one_round_trip_its_replay_a_transaction():
    """A new event the judge accepts: one statement, no BEGIN or COMMIT. A replay: that
    statement writes nothing, then the transaction's way answers it (the lock, the recorded
    event read)."""
    device = connect(make_device().device)
    submit(device)
    assignment = claim_next_job(device.pk)
    body = event(assignment.claim_id, "RECEIVED")
    outcome, sent = round_trips(lambda: record_device_event(device, assignment.job_id, body))
    assert outcome.created and outcome.job.status == "RECEIVED" and len(sent) == 1, sent
    assert sent[0].lstrip().startswith("WITH gate AS") and "FOR NO KEY UPDATE" in sent[0]
    job = PrintJob.objects.get(pk=assignment.job_id)
    assert job.status == "RECEIVED" and job.received_at is not None
    assert outcome.job.received_at == job.received_at and outcome.job.title == job.title

    replay, sent = round_trips(lambda: record_device_event(device, assignment.job_id, body))
    assert not replay.created and replay.event.pk == outcome.event.pk, sent
    assert len(sent) == 5 and (sent[1], sent[-1]) == ("BEGIN", "COMMIT"), sent
    assert replay.event.recorded_at == outcome.event.recorded_at

    progress = event(assignment.claim_id, "PROGRESS")
    outcome, sent = round_trips(lambda: record_device_event(device, assignment.job_id, progress))
    assert outcome.created and outcome.job.status == "RECEIVED" and len(sent) == 1, sent
    assert PrintJobEvent.objects.filter(job_id=assignment.job_id, type="PROGRESS").count() == 1


def test_a_pushing_sockets_release_says_in_the_same_statements_whether_a_job_waits():
    """RECEIVED recorded for a socket that claims next (``pushes_next``) tells whether the device
    has another job to claim, read in the event's own statement: the socket claims only then."""
    device = connect(make_device().device)
    submit(device)
    first = claim_next_job(device.pk)
    received = event(first.claim_id, "RECEIVED")
    outcome, sent = statements(
        lambda: record_device_event(device, first.job_id, received, pushes_next=True)
    )
    assert outcome.created and outcome.queued is False and len(sent) == 1, sent

    printed = event(first.claim_id, "PRINTED")
    record_device_event(device, first.job_id, printed)
    submit(device)
    second = claim_next_job(device.pk)
    waiting = submit(device)
    received = event(second.claim_id, "RECEIVED")
    outcome, sent = statements(
        lambda: record_device_event(device, second.job_id, received, pushes_next=True)
    )
    assert outcome.queued is True and len(sent) == 1, sent
    third = claim_next_job(device.pk)
    assert third.job_id == waiting.pk
    # Not asked (HTTP, a socket not pushing): not read.
    plain = record_device_event(device, third.job_id, event(third.claim_id, "RECEIVED"))
    assert plain.created and plain.queued is None


def test_submission_is_two_statements_and_its_idempotent_replay_too():
    device = make_device().device
    (job, created), sent = statements(
        lambda: api.submit_job(device.tenant, device.name, PDF, "application/pdf", title="a")
    )
    assert created and len(sent) == 2, sent
    stored = PrintJob.objects.get(pk=job.pk)
    assert (stored.status, stored.title, stored.expires_at) == ("QUEUED", "a", job.expires_at)
    assert bytes(stored.document.content) == PDF
    assert stored.events.get().type == "QUEUED"

    def keyed():
        return api.submit_job(device.tenant, device.name, PDF, "text/plain", idempotency_key="k")

    (first, created), sent = statements(keyed)
    assert created and len(sent) == 2, sent
    (again, created), sent = statements(keyed)
    assert not created and again.pk == first.pk and len(sent) == 2, sent


def test_authenticating_a_device_or_a_key_is_one_statement():
    """A right secret pays nothing for the throttle of failed authentications."""
    from qprint.domain import credentials

    made = make_device()
    found, sent = statements(
        lambda: credentials.authenticate(
            "10.0.0.1", made.token, credentials.device_for_token, "device"
        )
    )
    assert found.pk == made.device.pk and len(sent) == 1, sent
    key, secret = api.create_application_key(made.device.tenant, "app")
    credentials.key_for_secret(secret)  # its first use writes last_used_at (once a minute)
    found, sent = statements(
        lambda: credentials.authenticate(
            "10.0.0.1", secret, credentials.key_for_secret, "application"
        )
    )
    assert found.pk == key.pk and len(sent) == 1, sent


def test_a_tenant_with_webhooks_gets_its_deliveries_from_the_claims_transaction():
    """The one statement claims nothing for a tenant with an endpoint (the deliveries are
    written in the claim's transaction): the claim takes that way, and the device's next claims
    go there first."""
    from qprint.models import WebhookDelivery, WebhookEndpoint

    made = make_device()
    WebhookEndpoint.objects.create(
        tenant=made.device.tenant, url="https://hooks.example.com/q", secret="whsec_x"
    )
    connect(made.device)
    job = submit(made.device)
    assignment, sent = round_trips(lambda: claim_next_job(made.device.pk))
    assert assignment.job_id == job.pk
    assert WebhookDelivery.objects.filter(type="job.claimed").count() == 1
    # The one statement, then BEGIN, the lock, the claim; the outbox reads which endpoints, the
    # job for the payload, and writes the delivery; COMMIT.
    assert sent[0].lstrip().startswith("WITH gate AS") and sent[1] == "BEGIN", sent
    assert len(sent) == 1 + 2 + 2 + 3 and sent[-1] == "COMMIT", sent
    assert events.announcing(made.device.pk)

    again, sent = round_trips(lambda: claim_next_job(made.device.pk))
    assert again == assignment and sent[0] == "BEGIN" and len(sent) == 4, sent


def test_a_tenant_with_webhooks_has_its_events_recorded_in_the_moves_transaction():
    """The one statement writes nothing for a tenant with an endpoint (its deliveries are written
    with the move, in one transaction): the event is recorded that way, its delivery with it, and
    the device's next events go that way first."""
    from qprint.domain import events
    from qprint.models import WebhookDelivery, WebhookEndpoint

    made = make_device()
    WebhookEndpoint.objects.create(
        tenant=made.device.tenant, url="https://hooks.example.com/q", secret="whsec_x"
    )
    device = connect(made.device)
    submit(device)
    assignment = claim_next_job(device.pk)
    assert events.announcing(device.pk)  # the claim's one statement saw the endpoint
    events._ANNOUNCING.clear()  # the event finds out by itself
    received = event(assignment.claim_id, "RECEIVED")
    outcome, sent = round_trips(lambda: record_device_event(device, assignment.job_id, received))
    assert outcome.created and outcome.job.status == "RECEIVED"
    assert sent[0].lstrip().startswith("WITH gate AS") and sent[1] == "BEGIN", sent
    assert events.announcing(device.pk)

    printed = event(assignment.claim_id, "PRINTED")
    outcome, sent = round_trips(lambda: record_device_event(device, assignment.job_id, printed))
    assert outcome.created and outcome.job.status == "PRINTED"
    assert sent[0] == "BEGIN" and not any("WITH gate AS" in q for q in sent), sent
    assert WebhookDelivery.objects.filter(type="job.printed").count() == 1


# -- over HTTP: the token matched in the lock ---------------------------------------------------


@pytest.fixture
def views_on_this_thread(monkeypatch):
    """The async views' database work on the test's thread, where its queries are captured."""
    monkeypatch.setattr(executor.http, "inline", True)


def assert_locked_by_token(sent: list[str]) -> None:
    """One round trip: the statement locking the row that matches the token's hash, and
    claiming."""
    assert len(sent) == 1, sent
    assert sent[0].lstrip().startswith("WITH gate AS"), sent
    assert "FOR NO KEY UPDATE" in sent[0] and '"token_hash" =' in sent[0], sent[0]


def test_an_http_claim_is_one_round_trip_its_token_matched_in_the_lock(
    client, views_on_this_thread
):
    made = make_device()
    connect(made.device)
    job = submit(made.device)
    claim_url = reverse("qprint:device-claim")
    answer, sent = round_trips(lambda: client.post(claim_url, **made.auth))
    assert answer.status_code == 200 and answer.json()["job_id"] == str(job.pk)
    assert_locked_by_token(sent)
    assert PrintJob.objects.get(pk=job.pk).status == "CLAIMED"

    again, sent = round_trips(lambda: client.post(claim_url, **made.auth))
    assert again.status_code == 200 and again.json()["claim_id"] == answer.json()["claim_id"]
    assert_locked_by_token(sent)

    idle = make_device(name="idle")
    connect(idle.device)
    nothing, sent = round_trips(lambda: client.post(claim_url, **idle.auth))
    assert nothing.status_code == 204
    assert_locked_by_token(sent)

    Device.objects.filter(pk=idle.device.pk).update(enabled=False)
    refused, sent = round_trips(lambda: client.post(claim_url, **idle.auth))
    assert refused.status_code == 403 and refused.json()["error"] == "disabled"
    assert_locked_by_token(sent)


def test_an_http_claim_with_a_token_no_row_holds_goes_the_one_way_in(client, views_on_this_thread):
    """The lock matches no row: authenticated the one way in (401, counted by the throttle),
    with no lock of the transaction's way."""
    made = make_device()
    claim_url = reverse("qprint:device-claim")
    answer, sent = round_trips(
        lambda: client.post(claim_url, HTTP_AUTHORIZATION="Bearer qpd_wrong")
    )
    assert answer.status_code == 401 and answer.json()["error"] == "unauthorized"
    assert sent[0].lstrip().startswith("WITH gate AS"), sent
    assert not any("FOR NO KEY UPDATE" in q for q in sent[1:]), sent
    assert made.device.pk  # the device exists; its token was not the one shown


@pytest.fixture
def held():
    """A connected device holding a claimed job: ``(device_with_token, assignment)``."""
    made = make_device()
    connect(made.device)
    submit(made.device)
    return made, claim_next_job(made.device.pk)


def test_an_http_event_is_one_round_trip_its_token_matched_in_the_lock(
    client, views_on_this_thread, held
):
    made, assignment = held
    url = reverse("qprint:device-job-events", args=[assignment.job_id])
    body = event(assignment.claim_id, "RECEIVED")

    def report():
        return client.post(url, body, content_type="application/json", **made.auth)

    answer, sent = round_trips(report)
    assert answer.status_code == 201 and answer.json()["job_status"] == "RECEIVED"
    assert len(sent) == 1, sent
    assert sent[0].lstrip().startswith("WITH gate AS") and '"token_hash" =' in sent[0], sent
    assert PrintJob.objects.get(pk=assignment.job_id).status == "RECEIVED"

    # The replay: the one statement writes nothing; then the lock and the recorded event read.
    replay, sent = round_trips(report)
    assert replay.status_code == 200 and replay.json()["event_id"] == body["event_id"]
    assert len(sent) == 5 and (sent[1], sent[-1]) == ("BEGIN", "COMMIT"), sent
    assert '"token_hash" =' in sent[2] and "qprint_job_event" in sent[3], sent


def test_an_http_list_of_a_jobs_spooled_and_printed_is_one_round_trip(
    client, views_on_this_thread, held
):
    """A job's SPOOLED and how it ended in one request: one statement, the token matched in the
    job's lock, as one event is; sent again (each a replay), the one way in, then a transaction
    that answers each, the device known by its id."""
    made, assignment = held
    record_device_event(made.device, assignment.job_id, event(assignment.claim_id, "RECEIVED"))
    url = reverse("qprint:device-job-events", args=[assignment.job_id])
    body = [event(assignment.claim_id, "SPOOLED"), event(assignment.claim_id, "PRINTED")]

    def report():
        return client.post(url, body, content_type="application/json", **made.auth)

    answer, sent = round_trips(report)
    assert [r["status"] for r in answer.json()["results"]] == [201, 201]
    assert len(sent) == 1, sent
    assert sent[0].lstrip().startswith("WITH gate AS") and '"token_hash" =' in sent[0], sent
    assert PrintJob.objects.get(pk=assignment.job_id).status == "PRINTED"

    replay, sent = round_trips(report)
    assert [r["status"] for r in replay.json()["results"]] == [200, 200]
    assert '"token_hash" =' in sent[1] and "BEGIN" in sent and sent[-1] == "COMMIT", sent
    assert not any('"token_hash" =' in q for q in sent[2:]), sent


def test_an_http_download_is_one_statement_its_token_and_document_read_with_the_job(
    client, views_on_this_thread, held
):
    made, assignment = held
    url = reverse("qprint:device-job-document", args=[assignment.job_id])
    answer, sent = round_trips(lambda: client.get(url, **made.auth))
    assert answer.status_code == 200 and answer.content == PDF
    assert len(sent) == 1, sent
    assert '"token_hash" =' in sent[0] and "qprint_document" in sent[0], sent


def _report(assignment, kind, **kwargs):
    from qprint.domain.events import EventReport

    return EventReport(assignment.job_id, event(assignment.claim_id, kind), **kwargs)


def test_a_sockets_run_of_one_jobs_events_is_one_statement_with_no_transaction():
    """RECEIVED, SPOOLED and PRINTED of one job, sent together: one statement, committed by
    itself; the rows in the order sent, the job moved once, each answer the job as it stood after
    its own event."""
    from qprint.domain.events import record_events_together

    device = connect(make_device().device)
    submit(device)
    assignment = claim_next_job(device.pk)
    reports = [_report(assignment, kind) for kind in ("RECEIVED", "SPOOLED", "PRINTED")]
    outcomes, sent = round_trips(
        lambda: record_events_together(device.pk, reports, token_hash=device.token_hash)
    )
    assert [o.event.type for o in outcomes] == ["RECEIVED", "SPOOLED", "PRINTED"]
    assert [o.job.status for o in outcomes] == ["RECEIVED", "SPOOLED", "PRINTED"]
    assert all(o.created for o in outcomes)
    assert len(sent) == 1 and sent[0].lstrip().startswith("WITH gate AS"), sent
    rows = PrintJobEvent.objects.filter(job_id=assignment.job_id, source="DEVICE").order_by("pk")
    assert [(r.type, r.event_id) for r in rows] == [
        (o.event.type, o.event.event_id) for o in outcomes
    ]
    assert [r.pk for r in rows] == [o.event.pk for o in outcomes]
    job = PrintJob.objects.get(pk=assignment.job_id)
    assert job.status == "PRINTED" and job.received_at and job.finished_at
    assert (outcomes[0].job.received_at, outcomes[0].job.finished_at) == (job.received_at, None)


def test_a_batch_of_two_jobs_is_one_transaction_of_one_statement_per_job():
    """A job's SPOOLED and PRINTED, then the next job's RECEIVED: BEGIN, the run, the event
    alone, COMMIT."""
    from qprint.domain.events import record_events_together

    device = connect(make_device().device)
    submit(device)
    submit(device)
    first = claim_next_job(device.pk)
    reports = [_report(first, "RECEIVED")]
    record_events_together(device.pk, reports, token_hash=device.token_hash)
    second = claim_next_job(device.pk)
    reports = [_report(first, "SPOOLED"), _report(first, "PRINTED"), _report(second, "RECEIVED")]
    outcomes, sent = round_trips(
        lambda: record_events_together(device.pk, reports, token_hash=device.token_hash)
    )
    assert [(o.job.pk, o.job.status) for o in outcomes] == [
        (first.job_id, "SPOOLED"),
        (first.job_id, "PRINTED"),
        (second.job_id, "RECEIVED"),
    ]
    assert (sent[0], sent[-1]) == ("BEGIN", "COMMIT") and len(sent) == 4, sent
    assert all(q.lstrip().startswith("WITH gate AS") for q in sent[1:-1]), sent


def test_a_run_with_a_replay_in_it_is_answered_event_by_event():
    """The run's first event was recorded before (the device sends it again with the next one):
    the run's statement writes nothing; the replay is answered as one, the next one recorded."""
    from qprint.domain.events import record_events_together

    device = connect(make_device().device)
    submit(device)
    assignment = claim_next_job(device.pk)
    spooled = _report(assignment, "SPOOLED")
    record_events_together(
        device.pk, [_report(assignment, "RECEIVED")], token_hash=device.token_hash
    )
    record_events_together(device.pk, [spooled], token_hash=device.token_hash)
    reports = [spooled, _report(assignment, "PRINTED")]
    outcomes = record_events_together(device.pk, reports, token_hash=device.token_hash)
    assert [(o.created, o.event.type, o.job.status) for o in outcomes] == [
        (False, "SPOOLED", "SPOOLED"),
        (True, "PRINTED", "PRINTED"),
    ]
    assert PrintJobEvent.objects.filter(job_id=assignment.job_id, source="DEVICE").count() == 3


def test_a_run_whose_later_id_another_job_took_records_the_rest_and_refuses_that_one():
    """The run's PRINTED comes under an event id already recorded for another job: the run's
    statement writes nothing, then SPOOLED is recorded alone and PRINTED refused as a conflict."""
    from qprint.domain.events import record_events_together

    device = connect(make_device().device)
    submit(device)
    submit(device)
    other = claim_next_job(device.pk)
    taken = _report(other, "RECEIVED")
    record_events_together(device.pk, [taken], token_hash=device.token_hash)
    record_events_together(device.pk, [_report(other, "PRINTED")], token_hash=device.token_hash)
    assignment = claim_next_job(device.pk)
    record_events_together(
        device.pk, [_report(assignment, "RECEIVED")], token_hash=device.token_hash
    )
    printed = _report(assignment, "PRINTED")
    printed.payload["event_id"] = taken.payload["event_id"]
    outcomes = record_events_together(
        device.pk, [_report(assignment, "SPOOLED"), printed], token_hash=device.token_hash
    )
    assert outcomes[0].created and outcomes[0].job.status == "SPOOLED"
    assert getattr(outcomes[1], "code", None) == "event_conflict", outcomes[1]
    assert PrintJob.objects.get(pk=assignment.job_id).status == "SPOOLED"
    assert PrintJobEvent.objects.filter(event_id=taken.payload["event_id"]).count() == 1


def test_a_database_error_in_a_batch_records_each_event_alone(monkeypatch):
    """The database refuses the middle event: the batch rolls back, then each event runs on its
    own; the others are recorded once, the refused one is that event's outcome (and is not
    recorded)."""
    from django.db import DataError

    from qprint.core import prepared
    from qprint.domain import events

    device = connect(make_device().device)
    submit(device)
    assignment = claim_next_job(device.pk)
    real = prepared.fetch

    def refuse_spooled(sql, params=(), **kwargs):
        values = params.values() if isinstance(params, dict) else params
        if "INSERT INTO qprint_job_event" in sql and "SPOOLED" in values:
            raise DataError("refused by the database")
        return real(sql, params, **kwargs)

    # Both ways of recording an event (the batch's, and each event's alone) insert it there.
    monkeypatch.setattr(prepared, "fetch", refuse_spooled)
    reports = [_report(assignment, kind) for kind in ("RECEIVED", "SPOOLED", "PRINTED")]
    outcomes = events.record_events_together(device.pk, reports, token_hash=device.token_hash)
    assert outcomes[0].created and outcomes[2].created
    assert isinstance(outcomes[1], DataError)
    recorded = PrintJobEvent.objects.filter(job_id=assignment.job_id, source="DEVICE")
    assert sorted(recorded.values_list("type", flat=True)) == ["PRINTED", "RECEIVED"]


def test_a_refusal_in_a_batch_stops_nothing_else():
    from qprint.core.errors import QPrintError
    from qprint.domain.events import record_events_together

    device = connect(make_device().device)
    submit(device)
    assignment = claim_next_job(device.pk)
    reports = [_report(assignment, kind) for kind in ("RECEIVED", "QUEUED", "PRINTED")]
    outcomes = record_events_together(device.pk, reports, token_hash=device.token_hash)
    assert outcomes[0].created and outcomes[2].created
    assert isinstance(outcomes[1], QPrintError) and outcomes[1].status == 422  # not a device's
    assert PrintJob.objects.get(pk=assignment.job_id).status == "PRINTED"


@pytest.fixture
def woken():
    yield from recording_wakeups()


def test_a_submissions_read_of_its_device_reads_jobs_only_for_an_idempotency_key():
    """The device's statement looks for the job made under a key only when the submission has
    one, and then by the key's unique index: no ordering for an index of the tenant's jobs to
    serve, which a generic plan made on a small table once did by reading every one of them."""
    device = make_device().device
    _, sent = statements(lambda: api.submit_job(device.tenant, device.name, PDF, "text/plain"))
    assert "qprint_job" not in sent[0], sent[0]
    _, sent = statements(
        lambda: api.submit_job(device.tenant, device.name, PDF, "text/plain", idempotency_key="k")
    )
    lookups = re.findall(r'FROM "qprint_job" U0 (.*?) AS "idempotent', sent[0])
    assert len(lookups) == 2 and not any("ORDER BY" in sql for sql in lookups), sent[0]


def test_a_submission_alone_is_its_one_statement_without_begin_and_commit(woken):
    from qprint.models import WebhookDelivery, WebhookEndpoint

    device = connect(make_device().device)
    (job, created), sent = round_trips(
        lambda: api.submit_job(device.tenant, device.name, PDF, "application/pdf")
    )
    # The device, then the job with its document and its QUEUED event: the statement commits
    # by itself, and the device is woken after it.
    assert created and len(sent) == 2 and "BEGIN" not in sent, sent
    assert PrintJob.objects.get(pk=job.pk).status == "QUEUED"
    assert list(woken) == [(device.tenant, device.pk, "job_queued")]

    # An endpoint to announce the job to: the delivery is written in the job's transaction.
    WebhookEndpoint.objects.create(
        tenant=device.tenant, url="https://hooks.example.com/q", secret="whsec_x"
    )
    (job, created), sent = round_trips(
        lambda: api.submit_job(device.tenant, device.name, PDF, "application/pdf")
    )
    assert (sent[1], sent[-1]) == ("BEGIN", "COMMIT"), sent
    assert WebhookDelivery.objects.filter(type="job.queued").count() == 1


def test_the_submissions_statement_is_django_s_to_execute_wrappers_and_errors():
    """The one-statement insert runs through Django's machinery: an execute wrapper (an APM's
    tracing) sees it, and a refusal by the database arrives as Django's exception, which the
    API maps to its answer, not as the driver's own."""
    device = make_device().device
    seen = []

    def observe(execute, sql, params, many, context):
        seen.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(observe):
        api.submit_job(device.tenant, device.name, PDF, "application/pdf", title="seen")
    assert any("INSERT INTO" in sql and "qprint_job" in sql for sql in seen), seen

    with connection.cursor() as cursor:
        cursor.execute(
            "ALTER TABLE qprint_job ADD CONSTRAINT test_refused CHECK (title <> 'refused')"
        )
    try:
        with pytest.raises(IntegrityError):
            api.submit_job(device.tenant, device.name, PDF, "application/pdf", title="refused")
    finally:
        with connection.cursor() as cursor:
            cursor.execute("ALTER TABLE qprint_job DROP CONSTRAINT test_refused")
    assert not PrintJob.objects.filter(title="refused").exists()


def test_a_run_opening_with_received_again_keeps_the_time_the_job_was_received():
    """RECEIVED reported again under a new id, then SPOOLED, in one run: both recorded, the job
    SPOOLED, its ``received_at`` still the first RECEIVED's."""
    from qprint.domain.events import record_events_together

    device = connect(make_device().device)
    submit(device)
    assignment = claim_next_job(device.pk)
    record_events_together(
        device.pk, [_report(assignment, "RECEIVED")], token_hash=device.token_hash
    )
    received_at = PrintJob.objects.get(pk=assignment.job_id).received_at
    reports = [_report(assignment, "RECEIVED"), _report(assignment, "SPOOLED")]
    outcomes, sent = round_trips(
        lambda: record_events_together(device.pk, reports, token_hash=device.token_hash)
    )
    assert [(o.created, o.job.status) for o in outcomes] == [
        (True, "RECEIVED"),
        (True, "SPOOLED"),
    ]
    assert len(sent) == 1, sent
    job = PrintJob.objects.get(pk=assignment.job_id)
    assert (job.status, job.received_at) == ("SPOOLED", received_at)
    assert outcomes[0].job.received_at == received_at


def upgrade(token: str, address: str = "127.0.0.20"):
    """A socket's upgrade as the consumer makes it, with a new connection id."""
    presented = credentials.PresentedToken(token, address)
    return open_socket(presented, uuid.uuid4(), "node-up", 20.0)


def holding_jobs(device) -> tuple[tuple[str, str, str], ...]:
    """Three jobs of ``device``: the last submitted (a higher priority) claimed and received
    first, then SPOOLED; the first submitted received second; one only claimed (not active).
    What ``hello`` must list, oldest received first (not in the order they were submitted)."""
    first = submit(device)
    second = submit(device, priority=5)
    submit(device)
    listed = []
    for expected, status in ((second, "SPOOLED"), (first, "RECEIVED")):
        claimed = claim_next_job(device.pk)
        assert claimed.job_id == expected.pk
        record_device_event(device.pk, expected.pk, event(claimed, "RECEIVED"))
        if status == "SPOOLED":
            record_device_event(device.pk, expected.pk, event(claimed, "SPOOLED"))
        listed.append((str(expected.pk), str(claimed.claim_id), status))
    assert claim_next_job(device.pk) is not None  # the third: claimed, never received
    return tuple(listed)


def test_a_socket_upgrade_takes_the_record_in_one_statement_its_token_matched_in_it():
    """The token's lookup, the lock, the take and the read of the device's active jobs (the hello
    lists them, oldest received first) in one statement, committed by itself: one round trip."""
    made = make_device()
    listed = holding_jobs(connect(made.device))
    (device, taken), sent = round_trips(lambda: upgrade(made.token))
    assert len(sent) == 1, sent
    assert "token_hash" in sent[0] and "UPDATE" in sent[0] and "qprint_job" in sent[0]
    assert device.pk == made.device.pk and device.name == "front-desk"
    assert taken.enabled and not taken.paused
    assert taken.active_jobs == listed
    row = Device.objects.get(pk=made.device.pk)
    assert row.connection_node == "node-up" and not row.connection_ready
    assert row.connection_lease_expires_at is not None


def test_the_full_way_of_an_upgrade_lists_the_same_active_jobs():
    """A tenant with webhooks takes the full way (the door, the take with its ``device.connected``
    delivery, then a read of the active jobs): the same list as the one statement's."""
    made = make_device()
    listed = holding_jobs(connect(made.device))
    WebhookEndpoint.objects.create(
        tenant="acme", url="https://hooks.example.com/q", secret="whsec_x"
    )
    (_, taken), sent = round_trips(lambda: upgrade(made.token))
    assert len(sent) > 1, sent
    assert WebhookDelivery.objects.filter(type="device.connected").exists()
    assert taken.active_jobs == listed


def test_an_upgrade_its_statement_does_not_take_comes_in_through_the_one_door():
    """A disabled device, an unknown token and a token of another kind take nothing in the
    statement and get the door's answers (403, 401 with the failure counted); the row of the
    disabled device is not taken."""
    disabled = make_device(name="off", enabled=False)
    printer = make_device(name="star", kind="cloudprnt")
    with pytest.raises(QPrintError) as refused:
        upgrade(disabled.token)
    assert refused.value.status == 403
    assert Device.objects.get(pk=disabled.device.pk).connection_id is None
    for token in ("not-a-token", printer.token):
        with pytest.raises(Unauthorized):
            upgrade(token, "127.0.0.21")
    assert AuthFailureCount.objects.get(scope="addr:127.0.0.21").failures == 2
    assert Device.objects.get(pk=printer.device.pk).connection_id is None


def test_an_upgrade_of_a_tenant_with_webhooks_announces_device_connected_with_the_take():
    """The statement takes nothing for a tenant with an endpoint; the full way takes the record
    and writes the ``device.connected`` delivery in the same transaction."""
    made = make_device()
    WebhookEndpoint.objects.create(
        tenant="acme", url="https://hooks.example.com/q", secret="whsec_x"
    )
    device, _ = upgrade(made.token)
    assert device.pk == made.device.pk
    assert Device.objects.get(pk=made.device.pk).connection_node == "node-up"
    assert list(WebhookDelivery.objects.values_list("type", flat=True)) == ["device.connected"]
