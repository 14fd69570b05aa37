"""The ``QPRINT`` settings dict: each setting declared once, here (its default, what it is for, the
rule a value must meet and the check id naming a bad one).

Read through ``qprint_settings.NAME``; the object reloads on Django's ``setting_changed`` signal so
``override_settings(QPRINT=...)`` works in tests. Nothing is written onto ``django.conf.settings``.
``manage.py check`` runs :meth:`~qcluster.appsettings.AppSettings.check` over these declarations
(:mod:`qprint.core.checks`). The machinery is qcluster's (through the doors of
:mod:`qprint.core.cluster`), the same as ``QCLUSTER``'s. The document, webhook and CloudPRNT
settings are declared in :mod:`qprint.core.conf_features` (the kinds both use in
:mod:`qprint.core.conf_kinds`); this module assembles them with its own into ``SETTINGS``.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Any

from django.core import checks

from qprint.core.cluster import AppSettings, Setting, at_least, is_int, positive_int
from qprint.core.conf_features import FEATURE_SETTINGS
from qprint.core.conf_kinds import count, limit, seconds, strings

#: The longest a job may wait to be received (``expires_in``, ``JOB_TTL_SECONDS``): a century.
#: Longer has no use, and far longer is past the dates a database holds.
LONGEST_TTL_SECONDS = 100 * 366 * 24 * 3600

#: Deeper than this, Python's own JSON parser and encoder would run out of stack.
MAX_JSON_DEPTH_CEILING = 200
#: An assignment carries its document as base64 in one text frame or body: no more than this.
MAX_INLINE_CEILING = 16 * 1024 * 1024
_MEDIA_TYPE = re.compile(r"^[a-z0-9][a-z0-9!#$&^_.+-]*/[a-z0-9][a-z0-9!#$&^_.+-]*$")


def _heartbeat_load(app: AppSettings, value: Any) -> list[checks.CheckMessage]:
    if value >= 5:
        return []
    return [
        checks.Warning(
            f"{app.label('HEARTBEAT_SECONDS')} is {value}: every device pings that often.",
            hint="Use 5 seconds or more outside tests (the default is 20).",
            id="qprint.W001",
        )
    ]


def _json_depth_ceiling(app: AppSettings, value: Any) -> list[checks.CheckMessage]:
    if value <= MAX_JSON_DEPTH_CEILING:
        return []
    return [
        checks.Error(
            f"{app.label('MAX_JSON_DEPTH')} is {value}; the most is {MAX_JSON_DEPTH_CEILING}.",
            id="qprint.E010",
        )
    ]


def _networks(value: Any) -> bool:
    if not strings(value):
        return False
    try:
        for entry in value:
            ipaddress.ip_network(entry.strip(), strict=False)
    except ValueError:
        return False
    return True


def _media_types(value: Any) -> bool:
    return (
        isinstance(value, list | tuple | set | frozenset)
        and bool(value)
        and all(isinstance(t, str) and _MEDIA_TYPE.match(t.lower()) for t in value)
    )


SETTINGS: tuple[Setting, ...] = (
    Setting(
        "HEARTBEAT_SECONDS",
        20,
        "Devices ping this often; a connection's lease is three intervals.",
        must="a number of at least 1",
        valid=at_least(1),
        error="qprint.E002",
        more=_heartbeat_load,
    ),
    count(
        "MAX_DOCUMENT_BYTES",
        50 * 1024 * 1024,
        "Largest document accepted by the application API (413 above).",
    ),
    count(
        "WAKE_QUEUE_SIZE",
        10000,
        (
            "Bound of the process's publisher queue (wakeups and webhook notices); a full "
            "queue drops a message (wakeups are counted on /metrics)."
        ),
    ),
    Setting(
        "JOB_TTL_SECONDS",
        86400,
        "A job not received by then expires (None: never).",
        must=f"a positive integer of at most {LONGEST_TTL_SECONDS} (a century), or None",
        valid=lambda v: v is None or (positive_int(v) and v <= LONGEST_TTL_SECONDS),
        error="qprint.E004",
    ),
    count(
        "JOB_RETENTION_DAYS", 30, "Final jobs older than this are deleted by the retention task."
    ),
    seconds(
        "EXPIRY_SECONDS",
        30,
        "How often the expiry task runs (jobs past expires_at, unconfirmed CloudPRNT jobs, "
        "device commands past JOB_TTL_SECONDS); read when the process starts.",
    ),
    count(
        "MAX_FRAME_BYTES",
        64 * 1024,
        "Device socket: a text frame larger than this closes the socket with 4400.",
    ),
    count(
        "SOCKET_DB_THREADS",
        4,
        "Device socket: threads (and database connections) of each process's socket path "
        "(sizing: docs/OPERATIONS.md, PostgreSQL).",
    ),
    count(
        "HTTP_DB_THREADS",
        4,
        "HTTP API: threads of each process that run the async views' database work.",
    ),
    Setting(
        "GC_THRESHOLD",
        (2000, 10, 10),
        (
            "The garbage collector's thresholds in a node (gc.set_threshold), set by "
            "qprint.routing.freeze_start_up(). The default collects the youngest generation "
            "after 2,000 more allocations than frees, not Python's 700, so full collections, "
            "which stop every socket of the node, run about three times less often, and the "
            "cycles of closed sockets wait that much longer (docs/OPERATIONS.md, "
            '"Capacity"). None leaves the interpreter\'s.'
        ),
        must="None or three positive integers",
        valid=lambda value: (
            value is None
            or (
                isinstance(value, list | tuple)
                and len(value) == 3
                and all(positive_int(v) for v in value)
            )
        ),
        error="qprint.E031",
        hint='Python\'s own are (700, 10, 10); see docs/OPERATIONS.md, "Capacity".',
    ),
    seconds(
        "BUS_PROBE_SECONDS",
        2,
        "Device socket: how often each process probes its channel-layer path (outage detection).",
    ),
    seconds(
        "DRAIN_POLL_SECONDS",
        2,
        "Device socket: how often each web process reads its node's qcluster status (drain).",
    ),
    seconds(
        "DRAIN_SPREAD_SECONDS",
        5,
        "Device socket: a draining node closes its sockets spread over this many seconds.",
    ),
    Setting(
        "INLINE_DOCUMENT_MAX_BYTES",
        262144,
        (
            "Assignments: a document of at most this many bytes travels inside a pushed "
            "assignment, or a claim's answer that asked for it (the device asks for up to its "
            "own limit; 0: always downloaded)."
        ),
        must=f"an integer from 0 to {MAX_INLINE_CEILING} (it travels as base64 in one frame)",
        valid=lambda value: is_int(value) and 0 <= value <= MAX_INLINE_CEILING,
        error="qprint.E030",
        hint='See docs/PROTOCOL.md, "Pushed assignments".',
    ),
    limit(
        "MAX_FRAMES_PER_SECOND",
        50,
        (
            "Device socket: frames a device may send per second on average (bursts "
            "of five seconds' worth); a flood above it closes the socket with 4400."
        ),
    ),
    limit(
        "MAX_JSON_DEPTH",
        32,
        ('Input limits (docs/SECURITY.md, "Limits"): JSON nested deeper is refused (too_deep).'),
        more=_json_depth_ceiling,
    ),
    limit("MAX_JSON_ITEMS", 1000, "Entries of one JSON list or object (too_many)."),
    limit("MAX_PRINTERS", 256, "Printers one device may report (too_many)."),
    limit(
        "MAX_DETAIL_BYTES",
        64 * 1024,
        (
            "Bytes (as JSON) of an event's detail, a command's payload or result, a"
            " job's options and a printer's capabilities (too_long)."
        ),
    ),
    limit("MAX_SETTINGS_BYTES", 256 * 1024, "Bytes (as JSON) of a device's settings (too_long)."),
    limit("MAX_MESSAGE_LENGTH", 10000, "Characters of an event's message (too_long)."),
    limit(
        "AUTH_FAILURE_LIMIT",
        20,
        (
            "Failed authentications (unknown or revoked secret) allowed per client "
            "address, and per credential prefix, in AUTH_FAILURE_WINDOW_SECONDS; "
            "further wrong secrets 429 with Retry-After (a right one never is)."
        ),
    ),
    limit("AUTH_FAILURE_WINDOW_SECONDS", 60, "The window of AUTH_FAILURE_LIMIT, in seconds."),
    Setting(
        "TRUSTED_PROXIES",
        [],
        (
            "Addresses or networks (CIDR) of the proxies in front of the nodes (the load"
            " balancer, the ingress): from a peer among them, the client is the rightmost"
            " X-Forwarded-For entry that is not one of them. Empty: the peer is the client,"
            ' X-Forwarded-For is ignored (docs/SECURITY.md, "The client\'s address").'
        ),
        must="a list of addresses or networks (CIDR)",
        valid=_networks,
        error="qprint.E020",
        hint="The proxies in front of the nodes, e.g. ['10.0.0.0/8']; see docs/SECURITY.md.",
    ),
    seconds(
        "OVERVIEW_REFRESH_SECONDS",
        15,
        "Admin: the print overview on the Printing app page refreshes this often.",
    ),
    seconds(
        "JOB_WAIT_RECHECK_SECONDS",
        2,
        (
            "GET api/v1/jobs/<id>?wait=: the job is re-read this often besides the "
            "change notices (what a lost notice can cost, e.g. without Redis across"
            " nodes)."
        ),
    ),
    count(
        "MAX_WAITS_PER_KEY",
        50,
        (
            "GET api/v1/jobs/<id>?wait=: waits one application key may hold at once on one"
            " node (429 too_many_waits above; docs/SECURITY.md)."
        ),
    ),
    Setting(
        "ACCEPTED_CONTENT_TYPES",
        (
            "application/pdf",
            "application/postscript",
            "application/vnd.cups-pdf",
            "text/plain",
            "image/png",
            "image/jpeg",
            "image/pwg-raster",
            "image/urf",
            # raw: handed to the printer as they are (socket:// printers, CUPS raw queues)
            "application/vnd.cups-raw",
            "application/octet-stream",
            "application/vnd.zebra-zpl",  # ZPL, as IPP and CUPS name it
            "application/zpl",
            "application/x-zpl",
            "application/vnd.eltron-epl",  # EPL, as IPP label printers name it
            "application/x-epl",
            "application/vnd.escpos",  # ESC/POS receipt printers
            "application/x-escpos",
            # Star receipt printers' own languages (CloudPRNT devices take them as they are)
            "application/vnd.star.starprnt",
            "application/vnd.star.line",
            "application/vnd.star.starprntcore",
        ),
        (
            "Content types a submission may have (415 otherwise); parameters are "
            "ignored. docs/API.md."
        ),
        must="a non-empty list of media types such as 'application/pdf'",
        valid=_media_types,
        error="qprint.E008",
        hint="Without parameters (no '; charset=...'); see docs/API.md.",
    ),
    count(
        "ENROLMENT_EXPIRES_SECONDS",
        600,
        "Enrolment by code (docs/AGENT.md): a code not approved within this many seconds expires.",
    ),
    count(
        "ENROLMENT_INTERVAL_SECONDS",
        5,
        "Enrolment by code: the agent polls for its token this often (seconds).",
    ),
    count(
        "ENROLMENT_PENDING_PER_ADDRESS",
        10,
        "Enrolment by code: at most this many enrolments from one client address wait for an "
        "operator at once (a start beyond is 429): starts need no credential.",
    ),
    Setting(
        "ENROLMENT_VERIFICATION_URI",
        None,
        (
            "Enrolment by code: the page the agent tells its user to open (None: this node's"
            ' admin "Enrol a device" page, as the agent\'s request reached it).'
        ),
        must="None or an absolute http(s) URL",
        valid=lambda value: (
            value is None
            or (isinstance(value, str) and re.match(r"^https?://[^/\s]+", value) is not None)
        ),
        error="qprint.E014",
        hint=(
            "The admin's 'Enrol a device' page, e.g. "
            "https://print.example.com/admin/qprint/enrolment/ (docs/API.md, 'Enrolment')."
        ),
    ),
    seconds(
        "STUCK_JOB_SECONDS",
        3600,
        ('The admin\'s "stuck" job filter: RECEIVED or SPOOLED for longer than this many seconds.'),
    ),
    *FEATURE_SETTINGS,
)

qprint_settings = AppSettings(
    "QPRINT", "qprint", SETTINGS, not_a_dict="qprint.E001", unknown_key="qprint.W002"
)

#: Each setting's default, by name.
DEFAULTS: dict[str, Any] = qprint_settings.defaults
