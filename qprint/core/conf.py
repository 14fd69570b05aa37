"""The ``QPRINT`` settings dict: each setting declared once, here (its default, what it is for, the
rule a value must meet and the check id naming a bad one).

Read through ``qprint_settings.NAME``; the object reloads on Django's ``setting_changed`` signal so
``override_settings(QPRINT=...)`` works in tests. Nothing is written onto ``django.conf.settings``.
``manage.py check`` runs :meth:`~qcluster.appsettings.AppSettings.check` over these declarations
(:mod:`qprint.core.checks`). The machinery is qcluster's (through the doors of
:mod:`qprint.core.cluster`), the same as ``QCLUSTER``'s.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Any

from django.core import checks
from django.utils.module_loading import import_string

from qprint.core.cluster import (
    AppSettings,
    Setting,
    at_least,
    is_int,
    positive_int,
    positive_number,
)

#: Deeper than this, Python's own JSON parser and encoder would run out of stack.
MAX_JSON_DEPTH_CEILING = 200
#: A pushed assignment carries its document as base64 in one text frame: no more than this.
MAX_INLINE_CEILING = 16 * 1024 * 1024
#: Below this a render worker cannot even load PDFium (``qprint.E021``).
MIN_RENDER_MEMORY_BYTES = 64 * 1024 * 1024
_MEDIA_TYPE = re.compile(r"^[a-z0-9][a-z0-9!#$&^_.+-]*/[a-z0-9][a-z0-9!#$&^_.+-]*$")
_LIMITS_HINT = 'See docs/SECURITY.md, "Limits".'


def _count(name: str, default: int, doc: str) -> Setting:
    """A positive integer (``qprint.E003``)."""
    return Setting(
        name, default, doc, must="a positive integer", valid=positive_int, error="qprint.E003"
    )


def _seconds(name: str, default: float, doc: str) -> Setting:
    """A positive number of seconds, fractions allowed (``qprint.E003``)."""
    return Setting(
        name,
        default,
        doc,
        must="a positive number of seconds",
        valid=positive_number,
        error="qprint.E003",
    )


def _limit(name: str, default: int, doc: str, more=None) -> Setting:
    """An input limit or the authentication throttle, a positive integer (``qprint.E009``)."""
    return Setting(
        name,
        default,
        doc,
        must="a positive integer",
        valid=positive_int,
        error="qprint.E009",
        hint=_LIMITS_HINT,
        more=more,
    )


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


def _importable(app: AppSettings, value: Any) -> list[checks.CheckMessage]:
    try:
        import_string(value)
    except Exception as exc:  # a malformed path raises ImportError, a non-string other errors
        return [
            checks.Error(
                f"{app.label('DOCUMENT_BACKEND')} = {value!r} cannot be imported: {exc}.",
                id="qprint.E005",
            )
        ]
    return []


def _render_memory_floor(app: AppSettings, value: Any) -> list[checks.CheckMessage]:
    if value >= MIN_RENDER_MEMORY_BYTES:
        return []
    return [
        checks.Error(
            f"{app.label('RENDER_MEMORY_BYTES')} is {value}; a render worker needs at least "
            f"{MIN_RENDER_MEMORY_BYTES} (64 MiB) to load PDFium.",
            hint="The default is 512 MiB; see docs/DOCUMENTS.md.",
            id="qprint.E021",
        )
    ]


def _strings(value: Any) -> bool:
    return isinstance(value, list | tuple) and all(isinstance(h, str) for h in value)


def _hosts(app: AppSettings, hosts: Any) -> list[checks.CheckMessage]:
    """Each entry of ``WEBHOOK_ALLOWED_HOSTS`` is a host name, an address or a network."""
    label = app.label("WEBHOOK_ALLOWED_HOSTS")
    messages: list[checks.CheckMessage] = []
    for host in hosts:
        text = host.strip()
        if "/" in text:
            try:
                ipaddress.ip_network(text, strict=False)
            except ValueError:
                messages.append(
                    checks.Error(
                        f"{label} has {host!r}, not a network.",
                        hint="Use a host name, an address or a network such as 10.0.0.0/8.",
                        id="qprint.E007",
                    )
                )
        elif not text or any(c.isspace() for c in text):
            messages.append(
                checks.Error(f"{label} has {host!r}, not a host name or address.", id="qprint.E007")
            )
    return messages


def _networks(value: Any) -> bool:
    if not _strings(value):
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
    _count(
        "MAX_DOCUMENT_BYTES",
        50 * 1024 * 1024,
        "Largest document accepted by the application API (413 above).",
    ),
    _count(
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
        must="a positive integer or None",
        valid=lambda v: v is None or positive_int(v),
        error="qprint.E004",
    ),
    _count(
        "JOB_RETENTION_DAYS", 30, "Final jobs older than this are deleted by the retention task."
    ),
    Setting(
        "DOCUMENT_BACKEND",
        "qprint.documents.storage.DatabaseDocuments",
        (
            "Where documents live (dotted path): qprint.documents.storage.DatabaseDocuments "
            "or qprint.documents.storage.StorageDocuments."
        ),
        more=_importable,
    ),
    Setting(
        "DOCUMENT_STORAGE",
        "default",
        "The STORAGES alias StorageDocuments writes to.",
    ),
    _count(
        "MAX_FRAME_BYTES",
        64 * 1024,
        "Device socket: a text frame larger than this closes the socket with 4400.",
    ),
    _count(
        "SOCKET_DB_THREADS",
        8,
        "Device socket: threads (and database connections) of each process's socket path.",
    ),
    _count(
        "HTTP_DB_THREADS",
        8,
        "HTTP API: threads of each process that run the async views' database work.",
    ),
    _seconds(
        "BUS_PROBE_SECONDS",
        2,
        "Device socket: how often each process probes its channel-layer path (outage detection).",
    ),
    _seconds(
        "DRAIN_POLL_SECONDS",
        2,
        "Device socket: how often each web process reads its node's qcluster status (drain).",
    ),
    _seconds(
        "DRAIN_SPREAD_SECONDS",
        5,
        "Device socket: a draining node closes its sockets spread over this many seconds.",
    ),
    Setting(
        "INLINE_DOCUMENT_MAX_BYTES",
        262144,
        (
            "Device socket, pushed assignments: a document of at most this many bytes travels "
            "inside the pushed assignment (the device asks for up to its own limit; 0: always "
            "downloaded)."
        ),
        must=f"an integer from 0 to {MAX_INLINE_CEILING} (it travels as base64 in one frame)",
        valid=lambda value: is_int(value) and 0 <= value <= MAX_INLINE_CEILING,
        error="qprint.E030",
        hint='See docs/PROTOCOL.md, "Pushed assignments".',
    ),
    _limit(
        "MAX_FRAMES_PER_SECOND",
        50,
        (
            "Device socket: frames a device may send per second on average (bursts "
            "of five seconds' worth); a flood above it closes the socket with 4400."
        ),
    ),
    _limit(
        "MAX_JSON_DEPTH",
        32,
        ('Input limits (docs/SECURITY.md, "Limits"): JSON nested deeper is refused (too_deep).'),
        more=_json_depth_ceiling,
    ),
    _limit("MAX_JSON_ITEMS", 1000, "Entries of one JSON list or object (too_many)."),
    _limit("MAX_PRINTERS", 256, "Printers one device may report (too_many)."),
    _limit(
        "MAX_DETAIL_BYTES",
        64 * 1024,
        (
            "Bytes (as JSON) of an event's detail, a command's payload or result, a"
            " job's options and a printer's capabilities (too_long)."
        ),
    ),
    _limit("MAX_SETTINGS_BYTES", 256 * 1024, "Bytes (as JSON) of a device's settings (too_long)."),
    _limit("MAX_MESSAGE_LENGTH", 10000, "Characters of an event's message (too_long)."),
    _limit(
        "AUTH_FAILURE_LIMIT",
        20,
        (
            "Failed authentications (unknown or revoked secret) allowed per client "
            "address, and per credential prefix, in AUTH_FAILURE_WINDOW_SECONDS; "
            "further wrong secrets 429 with Retry-After (a right one never is)."
        ),
    ),
    _limit("AUTH_FAILURE_WINDOW_SECONDS", 60, "The window of AUTH_FAILURE_LIMIT, in seconds."),
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
    _seconds(
        "OVERVIEW_REFRESH_SECONDS",
        15,
        "Admin: the print overview on the Printing app page refreshes this often.",
    ),
    Setting(
        "WEBHOOK_ALLOW_HTTP",
        False,
        "Webhooks: allow http:// URLs (https only by default).",
        must="True or False",
        valid=lambda v: isinstance(v, bool),
        error="qprint.E007",
    ),
    Setting(
        "WEBHOOK_ALLOWED_HOSTS",
        [],
        (
            "Webhooks: host names, addresses or networks (CIDR) allowed although "
            "private, loopback or link-local (refused by default)."
        ),
        must="a list of strings",
        valid=_strings,
        error="qprint.E007",
        more=_hosts,
    ),
    _count(
        "WEBHOOK_MAX_IN_FLIGHT", 16, "Webhooks: deliveries in flight at once per sending process."
    ),
    _count(
        "WEBHOOK_MAX_IN_FLIGHT_PER_ENDPOINT",
        4,
        (
            "Webhooks: deliveries SENDING at once to one endpoint (counted over the cluster): a"
            ' tenant whose receivers hang holds no more (docs/WEBHOOKS.md, "Fairness").'
        ),
    ),
    _count(
        "WEBHOOK_MAX_IN_FLIGHT_PER_TENANT",
        8,
        "Webhooks: deliveries SENDING at once to all endpoints of one tenant (over the cluster).",
    ),
    _seconds(
        "WEBHOOK_SLOW_SECONDS",
        2.0,
        "Webhooks: an attempt slower than this (or without an answer) holds the endpoint back.",
    ),
    _count(
        "WEBHOOK_MAX_ENDPOINTS_PER_TENANT",
        10,
        "Webhooks: endpoints one tenant may have (422 too_many above).",
    ),
    _count(
        "WEBHOOK_TESTS_PER_MINUTE",
        10,
        "Webhooks: POST api/v1/webhooks/<id>/test calls one tenant may make a minute (429 above).",
    ),
    _seconds(
        "JOB_WAIT_RECHECK_SECONDS",
        2,
        (
            "GET api/v1/jobs/<id>?wait=: the job is re-read this often besides the "
            "change notices (what a lost notice can cost, e.g. without Redis across"
            " nodes)."
        ),
    ),
    _count(
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
    _count(
        "ENROLMENT_EXPIRES_SECONDS",
        600,
        "Enrolment by code (docs/AGENT.md): a code not approved within this many seconds expires.",
    ),
    _count(
        "ENROLMENT_INTERVAL_SECONDS",
        5,
        "Enrolment by code: the agent polls for its token this often (seconds).",
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
    _seconds(
        "STUCK_JOB_SECONDS",
        3600,
        ('The admin\'s "stuck" job filter: RECEIVED or SPOOLED for longer than this many seconds.'),
    ),
    _seconds(
        "CLOUDPRNT_POLL_SECONDS",
        5,
        "CloudPRNT printers (docs/CLOUDPRNT.md): the poll interval to set on the printer, and "
        "assumed until the printer reports its own; a printer is live while it polled within 3 "
        "intervals.",
    ),
    _seconds(
        "CLOUDPRNT_CONFIRM_SECONDS",
        120,
        "CloudPRNT: a job the printer fetched and did not confirm within this many seconds ends "
        "OUTCOME_UNKNOWN (never offered again).",
    ),
    _count(
        "CLOUDPRNT_MAX_POLL_BYTES",
        16 * 1024,
        "CloudPRNT: the largest poll body accepted (413 above).",
    ),
    _count(
        "RENDER_WORKERS",
        2,
        'Documents (docs/DOCUMENTS.md, "Bounds"): render worker processes per node process.',
    ),
    _seconds(
        "RENDER_TIMEOUT_SECONDS",
        10,
        "The seconds one document may take to render (then its worker is killed: 422 "
        "render_too_slow).",
    ),
    Setting(
        "RENDER_MEMORY_BYTES",
        512 * 1024 * 1024,
        "The address space of one render worker (more: 422 too_much_memory or render_failed).",
        must="a positive integer",
        valid=positive_int,
        error="qprint.E003",
        more=_render_memory_floor,
    ),
    _count(
        "RENDER_MAX_PAGES",
        1000,
        "The pages a document may have to be rendered or checked (422 too_many_pages).",
    ),
    _count(
        "RENDER_MAX_PIXELS",
        25_000_000,
        "The pixels of one drawn page or source image (422 too_many_pixels).",
    ),
    _count(
        "RENDER_CACHE_BYTES",
        32 * 1024 * 1024,
        "The bytes of rendered pages each node process keeps (least recently used out).",
    ),
)

qprint_settings = AppSettings(
    "QPRINT", "qprint", SETTINGS, not_a_dict="qprint.E001", unknown_key="qprint.W002"
)

#: Each setting's default, by name.
DEFAULTS: dict[str, Any] = qprint_settings.defaults
