"""The admin console's read models: what a device's page and a job's page show (docs/ADMIN.md).

Read on each render, with the shared predicates (liveness, queue depth, claimable, held) and the
claim gate's own decision; the admin adds only the buttons a user may press.
"""

from __future__ import annotations

from typing import Any

from django.db.models import DurationField, ExpressionWrapper, F, OuterRef, QuerySet, Subquery
from django.db.models.functions import Now
from django.utils.translation import gettext_lazy as _

from qprint.core import gate
from qprint.domain import jobs
from qprint.models import Device, DevicePrinter, PrintJob


def devices(queryset: QuerySet) -> QuerySet:
    """``queryset`` of devices read as :func:`device_console` and the device list need them:
    liveness and queue depth, the lease left and the time since the device was last seen
    (database clock), and the default printer's status."""
    lease_left = ExpressionWrapper(
        F("connection_lease_expires_at") - Now(), output_field=DurationField()
    )
    seen_ago = ExpressionWrapper(Now() - F("last_seen_at"), output_field=DurationField())
    return (
        queryset.with_liveness()
        .with_queue_depth()
        .annotate(
            lease_left=lease_left,
            seen_ago=seen_ago,
            printer_status=Subquery(
                DevicePrinter.objects.filter(device=OuterRef("pk"))
                .order_by("-is_default", "name")
                .values("status")[:1]
            ),
        )
    )


def revision_words(applied: int, current: int) -> str:
    """An applied revision against the current one, in plain words."""
    if applied == current:
        return _("up to date")
    return _("waiting for the device (it applied %(applied)d, current is %(current)d)") % {
        "applied": applied,
        "current": current,
    }


def milliseconds(delta) -> int | None:
    return None if delta is None else round(delta.total_seconds() * 1000)


def device_console(device: Device, *, rows: int) -> dict[str, Any]:
    """A device (read through :func:`devices`): its connection, the claim gate, the job it holds,
    its queue and its ``rows`` most recent jobs, its printers' states."""
    refusal = gate.refusal(device)
    live = bool(device.connection_live)
    its_jobs = PrintJob.objects.filter(device=device)
    return {
        "live": live,
        "node": device.connection_node if live else "",
        "ready": live and device.connection_ready,
        "since": device.connection_since if live else None,
        "lease_left_seconds": (
            max(0, round(device.lease_left.total_seconds()))
            if live and device.lease_left is not None
            else None
        ),
        "last_seen_at": device.last_seen_at,
        "seen_seconds_ago": (
            max(0, round(device.seen_ago.total_seconds())) if device.seen_ago is not None else None
        ),
        "control": revision_words(device.control_applied_revision, device.control_revision),
        "settings": revision_words(device.settings_applied_revision, device.settings_revision),
        "control_up_to_date": device.control_applied_revision == device.control_revision,
        "gate_open": refusal is None,
        "gate_code": refusal.code if refusal else "open",
        "gate_message": refusal.message if refusal else _("The device may claim now."),
        "claimed": its_jobs.held().first(),
        "queue": list(its_jobs.claimable()[:rows]),
        "queue_depth": device.queue_depth,
        "printers": [
            {
                "printer": printer,
                "reasons": [str(r) for r in (printer.capabilities or {}).get("state_reasons", [])],
                "message": (printer.capabilities or {}).get("state_message", ""),
            }
            for printer in DevicePrinter.objects.filter(device=device).order_by("name")
        ],
        "recent": list(its_jobs.order_by("-created_at")[:rows]),
    }


def job_console(job: PrintJob) -> dict[str, Any]:
    """A job's timeline (each event, its node, who, and the milliseconds since the previous
    one), its reprints and whether it may be cancelled now."""
    timeline, previous = [], None
    for event in jobs.events_of(job):
        detail = event.detail if isinstance(event.detail, dict) else {}
        node = detail.get("node") or (job.claim_node if event.type == "CLAIMED" else "")
        timeline.append(
            {
                "event": event,
                "node": node,
                "by": detail.get("by") or detail.get("submitted_by") or "",
                "since_previous_ms": milliseconds(
                    event.recorded_at - previous if previous else None
                ),
            }
        )
        previous = event.recorded_at
    return {
        "timeline": timeline,
        "total_ms": milliseconds(previous - timeline[0]["event"].recorded_at) if timeline else None,
        "reprints": list(jobs.reprints_of(job).only("id", "status", "created_at")),
        "cancellable": jobs.may_cancel(job),
    }
