"""The ``QPRINT`` settings of the features around the queue: where documents live and how they
are rendered, the webhooks and the CloudPRNT printers (each declared once, with its default, doc,
rule and check id). :mod:`qprint.core.conf` assembles them with the socket, limit and job
settings into the one ``QPRINT`` dict; read them through ``qprint_settings`` as any other.
"""

from __future__ import annotations

import ipaddress
from typing import Any

from django.core import checks
from django.utils.module_loading import import_string

from qprint.core.cluster import AppSettings, Setting, positive_int
from qprint.core.conf_kinds import count, seconds, strings

#: Below this a render worker cannot even load PDFium (``qprint.E021``).
MIN_RENDER_MEMORY_BYTES = 64 * 1024 * 1024


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


FEATURE_SETTINGS: tuple[Setting, ...] = (
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
        valid=strings,
        error="qprint.E007",
        more=_hosts,
    ),
    count(
        "WEBHOOK_MAX_IN_FLIGHT", 16, "Webhooks: deliveries in flight at once per sending process."
    ),
    count(
        "WEBHOOK_MAX_IN_FLIGHT_PER_ENDPOINT",
        4,
        (
            "Webhooks: deliveries SENDING at once to one endpoint (counted over the cluster): a"
            ' tenant whose receivers hang holds no more (docs/WEBHOOKS.md, "Fairness").'
        ),
    ),
    count(
        "WEBHOOK_MAX_IN_FLIGHT_PER_TENANT",
        8,
        "Webhooks: deliveries SENDING at once to all endpoints of one tenant (over the cluster).",
    ),
    seconds(
        "WEBHOOK_SLOW_SECONDS",
        2.0,
        "Webhooks: an attempt slower than this (or without an answer) holds the endpoint back.",
    ),
    count(
        "WEBHOOK_MAX_ENDPOINTS_PER_TENANT",
        10,
        "Webhooks: endpoints one tenant may have (422 too_many above).",
    ),
    count(
        "WEBHOOK_TESTS_PER_MINUTE",
        10,
        "Webhooks: POST api/v1/webhooks/<id>/test calls one tenant may make a minute (429 above).",
    ),
    seconds(
        "CLOUDPRNT_POLL_SECONDS",
        5,
        "CloudPRNT printers (docs/CLOUDPRNT.md): the poll interval to set on the printer, and "
        "assumed until the printer reports its own; a printer is live while it polled within 3 "
        "intervals.",
    ),
    seconds(
        "CLOUDPRNT_CONFIRM_SECONDS",
        120,
        "CloudPRNT: a job the printer fetched and did not confirm within this many seconds ends "
        "OUTCOME_UNKNOWN (never offered again).",
    ),
    count(
        "CLOUDPRNT_MAX_POLL_BYTES",
        16 * 1024,
        "CloudPRNT: the largest poll body accepted (413 above).",
    ),
    count(
        "RENDER_WORKERS",
        2,
        'Documents (docs/DOCUMENTS.md, "Bounds"): render worker processes per node process.',
    ),
    seconds(
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
    count(
        "RENDER_MAX_PAGES",
        1000,
        "The pages a document may have to be rendered or checked (422 too_many_pages).",
    ),
    count(
        "RENDER_MAX_PIXELS",
        25_000_000,
        "The pixels of one drawn page, source image or CloudPRNT printer's image (422 "
        "too_many_pixels).",
    ),
    count(
        "RENDER_CACHE_BYTES",
        32 * 1024 * 1024,
        "The bytes of rendered images each node process keeps (least recently used out).",
    ),
)
