"""The ``QPRINT`` settings dict: its defaults live here and nowhere else.

Read through ``qprint_settings.NAME``; the object reloads on Django's ``setting_changed`` signal so
``override_settings(QPRINT=...)`` works in tests. Nothing is written onto ``django.conf.settings``.
"""

from typing import Any

from django.conf import settings
from django.core.signals import setting_changed

DEFAULTS: dict[str, Any] = {
    # Devices ping this often; a connection's lease is three intervals.
    "HEARTBEAT_SECONDS": 20,
    # Largest document accepted by the application API (413 above).
    "MAX_DOCUMENT_BYTES": 50 * 1024 * 1024,
    # Bound of the background wakeup publisher's queue; a full queue drops (and counts) a wakeup.
    "WAKE_QUEUE_SIZE": 10000,
    # A job not received by then expires (None: never).
    "JOB_TTL_SECONDS": 86400,
    # Final jobs older than this are deleted by the retention task.
    "JOB_RETENTION_DAYS": 30,
    # Where documents live (dotted path): qprint.documents.storage.DatabaseDocuments or
    # qprint.documents.storage.StorageDocuments.
    "DOCUMENT_BACKEND": "qprint.documents.storage.DatabaseDocuments",
    # The STORAGES alias StorageDocuments writes to.
    "DOCUMENT_STORAGE": "default",
    # Device socket: a text frame larger than this closes the socket with 4400.
    "MAX_FRAME_BYTES": 64 * 1024,
    # Device socket: threads (and database connections) of each process's socket path.
    "SOCKET_DB_THREADS": 8,
    # HTTP API: threads of each process that run the async views' database work.
    "HTTP_DB_THREADS": 8,
    # Device socket: how often each process probes its channel-layer path (outage detection).
    "BUS_PROBE_SECONDS": 2,
    # Device socket: how often each web process reads its node's qcluster status (drain).
    "DRAIN_POLL_SECONDS": 2,
    # Device socket: a draining node closes its sockets spread over this many seconds.
    "DRAIN_SPREAD_SECONDS": 5,
    # Device socket: frames a device may send per second on average (bursts of five seconds'
    # worth); a flood above it closes the socket with 4400.
    "MAX_FRAMES_PER_SECOND": 50,
    # Input limits (docs/SECURITY.md, "Limits"): JSON nested deeper is refused (too_deep).
    "MAX_JSON_DEPTH": 32,
    # Entries of one JSON list or object (too_many).
    "MAX_JSON_ITEMS": 1000,
    # Printers one device may report (too_many).
    "MAX_PRINTERS": 256,
    # Bytes (as JSON) of an event's detail, a command's payload or result, a job's options and
    # a printer's capabilities (too_long).
    "MAX_DETAIL_BYTES": 64 * 1024,
    # Bytes (as JSON) of a device's settings (too_long).
    "MAX_SETTINGS_BYTES": 256 * 1024,
    # Characters of an event's message (too_long).
    "MAX_MESSAGE_LENGTH": 10000,
    # Failed authentications (unknown or revoked secret) allowed per source address, and per
    # credential prefix, in AUTH_FAILURE_WINDOW_SECONDS; above it 429 with Retry-After.
    "AUTH_FAILURE_LIMIT": 20,
    "AUTH_FAILURE_WINDOW_SECONDS": 60,
    # Addresses or networks (CIDR) of the proxies in front of the nodes (the load balancer, the
    # ingress): from a peer among them, the client is the rightmost X-Forwarded-For entry that is
    # not one of them. Empty: the peer is the client, X-Forwarded-For is ignored (docs/SECURITY.md).
    "TRUSTED_PROXIES": [],
    # Admin: the print overview on the Printing app page refreshes this often.
    "OVERVIEW_REFRESH_SECONDS": 15,
    # Webhooks: allow http:// URLs (https only by default).
    "WEBHOOK_ALLOW_HTTP": False,
    # Webhooks: host names, addresses or networks (CIDR) allowed although private, loopback or
    # link-local (refused by default).
    "WEBHOOK_ALLOWED_HOSTS": [],
    # Webhooks: deliveries in flight at once per sending process.
    "WEBHOOK_MAX_IN_FLIGHT": 16,
    # Webhooks: deliveries SENDING at once to one endpoint, and to all endpoints of one tenant
    # (counted over the cluster): a tenant whose receivers hang holds no more (docs/WEBHOOKS.md).
    "WEBHOOK_MAX_IN_FLIGHT_PER_ENDPOINT": 4,
    "WEBHOOK_MAX_IN_FLIGHT_PER_TENANT": 8,
    # Webhooks: an attempt slower than this (or without an answer) holds the endpoint back.
    "WEBHOOK_SLOW_SECONDS": 2.0,
    # Webhooks: endpoints one tenant may have (422 too_many above).
    "WEBHOOK_MAX_ENDPOINTS_PER_TENANT": 10,
    # Webhooks: POST api/v1/webhooks/<id>/test calls one tenant may make per minute (429 above).
    "WEBHOOK_TESTS_PER_MINUTE": 10,
    # GET api/v1/jobs/<id>?wait=: the job is re-read this often besides the change notices (what
    # a lost notice can cost, e.g. without Redis across nodes).
    "JOB_WAIT_RECHECK_SECONDS": 2,
    # GET api/v1/jobs/<id>?wait=: waits one application key may hold at once on one node (429
    # too_many_waits above; docs/SECURITY.md).
    "MAX_WAITS_PER_KEY": 50,
    # Content types a submission may have (415 otherwise); parameters are ignored. docs/API.md.
    "ACCEPTED_CONTENT_TYPES": (
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
    # CloudPRNT printers (docs/CLOUDPRNT.md): the poll interval to set on the printer, and assumed
    # until the printer reports its own; a printer is live while it polled within 3 intervals.
    "CLOUDPRNT_POLL_SECONDS": 5,
    # CloudPRNT: a job the printer fetched and did not confirm within this many seconds ends
    # OUTCOME_UNKNOWN (never offered again).
    "CLOUDPRNT_CONFIRM_SECONDS": 120,
    # CloudPRNT: the largest poll body accepted (413 above).
    "CLOUDPRNT_MAX_POLL_BYTES": 16 * 1024,
    # Documents (docs/DOCUMENTS.md, "Bounds"): render worker processes per node process, ...
    "RENDER_WORKERS": 2,
    # ... the seconds one document may take (then its worker is killed: 422 render_too_slow), ...
    "RENDER_TIMEOUT_SECONDS": 10,
    # ... the address space of one worker (more: 422 too_much_memory or render_failed), ...
    "RENDER_MEMORY_BYTES": 512 * 1024 * 1024,
    # ... the pages a document may have to be rendered or checked (422 too_many_pages), ...
    "RENDER_MAX_PAGES": 1000,
    # ... the pixels of one drawn page or source image (422 too_many_pixels), ...
    "RENDER_MAX_PIXELS": 25_000_000,
    # ... and the bytes of rendered pages each node process keeps (least recently used out).
    "RENDER_CACHE_BYTES": 32 * 1024 * 1024,
    # The admin's "stuck" job filter: RECEIVED or SPOOLED for longer than this many seconds.
    "STUCK_JOB_SECONDS": 3600,
}


class QPrintSettings:
    def __init__(self) -> None:
        self._cache: dict[str, Any] = {}

    @property
    def user_settings(self) -> dict[str, Any]:
        return getattr(settings, "QPRINT", None) or {}

    def __getattr__(self, name: str) -> Any:
        if name not in DEFAULTS:
            raise AttributeError(f"Unknown QPRINT setting: {name!r}")
        if name not in self._cache:
            self._cache[name] = self.user_settings.get(name, DEFAULTS[name])
        return self._cache[name]

    def reload(self) -> None:
        self._cache.clear()


qprint_settings = QPrintSettings()


def _reload(*, setting: str, **kwargs: Any) -> None:
    if setting == "QPRINT":
        qprint_settings.reload()


setting_changed.connect(_reload)
