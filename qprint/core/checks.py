"""System checks for the ``QPRINT`` settings (ids ``qprint.E0xx`` / ``qprint.W0xx``).

- ``qprint.E001``: ``QPRINT`` is not a dict.
- ``qprint.E002``: ``HEARTBEAT_SECONDS`` is not a number of at least 1.
- ``qprint.W001``: ``HEARTBEAT_SECONDS`` is below 5 (every device pings that often: load).
- ``qprint.E003``: a setting that must be a positive integer (or number of seconds) is not.
- ``qprint.E004``: ``JOB_TTL_SECONDS`` is neither a positive integer nor ``None``.
- ``qprint.W002``: ``QPRINT`` has a key qprint does not know (a typo is otherwise silent).
- ``qprint.E005``: ``DOCUMENT_BACKEND`` cannot be imported.
- ``qprint.E006``: ``qcluster`` is not in ``INSTALLED_APPS`` (qprint runs on its nodes: node
  identity, singleton tasks, drain; see docs/CLUSTER.md, "Doors for other apps").
- ``qprint.E009``: an input limit or the authentication throttle (``MAX_JSON_DEPTH``,
  ``MAX_JSON_ITEMS``, ``MAX_PRINTERS``, ``MAX_DETAIL_BYTES``, ``MAX_SETTINGS_BYTES``,
  ``MAX_MESSAGE_LENGTH``, ``MAX_FRAMES_PER_SECOND``, ``AUTH_FAILURE_LIMIT``,
  ``AUTH_FAILURE_WINDOW_SECONDS``) is not a positive integer.
- ``qprint.E010``: ``MAX_JSON_DEPTH`` is above 200 (the JSON parser's own stack would give out
  first: a deep body would be refused by the parser, not by the limit).
- ``qprint.E007``: ``WEBHOOK_ALLOW_HTTP`` is not a bool, or ``WEBHOOK_ALLOWED_HOSTS`` is not a list
  of host names, addresses or networks.
- ``qprint.E008``: ``ACCEPTED_CONTENT_TYPES`` is not a non-empty list of ``type/subtype`` names.
- ``qprint.E020``: ``TRUSTED_PROXIES`` is not a list of addresses or networks (CIDR).
- ``qprint.E021``: ``RENDER_MEMORY_BYTES`` is below 64 MiB, too little for a render worker to load
  PDFium (every preview and fit check would fail; docs/DOCUMENTS.md).
"""

import ipaddress
import re
from typing import Any

from django.apps import apps
from django.conf import settings
from django.core import checks
from django.utils.module_loading import import_string

from qprint.core.conf import DEFAULTS

POSITIVE_INTEGERS = (
    "MAX_DOCUMENT_BYTES",
    "WAKE_QUEUE_SIZE",
    "JOB_RETENTION_DAYS",
    "MAX_FRAME_BYTES",
    "SOCKET_DB_THREADS",
    "HTTP_DB_THREADS",
    "WEBHOOK_MAX_IN_FLIGHT",
    "MAX_WAITS_PER_KEY",
    "WEBHOOK_MAX_IN_FLIGHT_PER_ENDPOINT",
    "WEBHOOK_MAX_IN_FLIGHT_PER_TENANT",
    "WEBHOOK_MAX_ENDPOINTS_PER_TENANT",
    "WEBHOOK_TESTS_PER_MINUTE",
    "CLOUDPRNT_MAX_POLL_BYTES",
    "RENDER_WORKERS",
    "RENDER_MEMORY_BYTES",
    "RENDER_MAX_PAGES",
    "RENDER_MAX_PIXELS",
    "RENDER_CACHE_BYTES",
)
#: Input limits and the authentication throttle (docs/SECURITY.md, "Limits"): ``qprint.E009``.
LIMITS = (
    "MAX_FRAMES_PER_SECOND",
    "MAX_JSON_DEPTH",
    "MAX_JSON_ITEMS",
    "MAX_PRINTERS",
    "MAX_DETAIL_BYTES",
    "MAX_SETTINGS_BYTES",
    "MAX_MESSAGE_LENGTH",
    "AUTH_FAILURE_LIMIT",
    "AUTH_FAILURE_WINDOW_SECONDS",
)
#: Deeper than this, Python's own JSON parser and encoder would run out of stack.
MAX_JSON_DEPTH_CEILING = 200
#: Seconds of the device socket's background work (fractions allowed).
POSITIVE_NUMBERS = (
    "BUS_PROBE_SECONDS",
    "DRAIN_POLL_SECONDS",
    "DRAIN_SPREAD_SECONDS",
    "OVERVIEW_REFRESH_SECONDS",
    "JOB_WAIT_RECHECK_SECONDS",
    "STUCK_JOB_SECONDS",
    "WEBHOOK_SLOW_SECONDS",
    "CLOUDPRNT_POLL_SECONDS",
    "CLOUDPRNT_CONFIRM_SECONDS",
    "RENDER_TIMEOUT_SECONDS",
)
#: Below this a render worker cannot even load PDFium (``qprint.E021``).
MIN_RENDER_MEMORY_BYTES = 64 * 1024 * 1024
_MEDIA_TYPE = re.compile(r"^[a-z0-9][a-z0-9!#$&^_.+-]*/[a-z0-9][a-z0-9!#$&^_.+-]*$")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@checks.register()
def check_qcluster_installed(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    if apps.is_installed("qcluster"):
        return []
    return [
        checks.Error(
            "qprint needs qcluster: add 'qcluster' to INSTALLED_APPS.",
            hint="qprint uses qcluster for the node's identity, its singleton tasks (job expiry "
            "and retention) and the drain of device sockets.",
            id="qprint.E006",
        )
    ]


@checks.register()
def check_qprint_settings(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    user = getattr(settings, "QPRINT", None)
    if user is None:
        return []
    if not isinstance(user, dict):
        return [
            checks.Error(
                f"QPRINT must be a dict, not {type(user).__name__}.",
                id="qprint.E001",
            )
        ]
    errors: list[checks.CheckMessage] = []
    for key in sorted(set(user) - set(DEFAULTS)):
        errors.append(
            checks.Warning(
                f"QPRINT[{key!r}] is not a qprint setting.",
                hint=f"Known settings: {', '.join(sorted(DEFAULTS))}.",
                id="qprint.W002",
            )
        )

    heartbeat = user.get("HEARTBEAT_SECONDS", DEFAULTS["HEARTBEAT_SECONDS"])
    if isinstance(heartbeat, bool) or not isinstance(heartbeat, int | float) or heartbeat < 1:
        errors.append(
            checks.Error(
                f"QPRINT['HEARTBEAT_SECONDS'] must be a number of at least 1, got {heartbeat!r}.",
                id="qprint.E002",
            )
        )
    elif heartbeat < 5:
        errors.append(
            checks.Warning(
                f"QPRINT['HEARTBEAT_SECONDS'] is {heartbeat}: every device pings that often.",
                hint="Use 5 seconds or more outside tests (the default is 20).",
                id="qprint.W001",
            )
        )

    for key in POSITIVE_INTEGERS:
        value = user.get(key, DEFAULTS[key])
        if not _is_int(value) or value <= 0:
            errors.append(
                checks.Error(
                    f"QPRINT[{key!r}] must be a positive integer, got {value!r}.",
                    id="qprint.E003",
                )
            )

    for key in POSITIVE_NUMBERS:
        value = user.get(key, DEFAULTS[key])
        if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
            errors.append(
                checks.Error(
                    f"QPRINT[{key!r}] must be a positive number of seconds, got {value!r}.",
                    id="qprint.E003",
                )
            )

    for key in LIMITS:
        value = user.get(key, DEFAULTS[key])
        if not _is_int(value) or value <= 0:
            errors.append(
                checks.Error(
                    f"QPRINT[{key!r}] must be a positive integer, got {value!r}.",
                    hint='See docs/SECURITY.md, "Limits".',
                    id="qprint.E009",
                )
            )
    depth = user.get("MAX_JSON_DEPTH", DEFAULTS["MAX_JSON_DEPTH"])
    if _is_int(depth) and depth > MAX_JSON_DEPTH_CEILING:
        errors.append(
            checks.Error(
                f"QPRINT['MAX_JSON_DEPTH'] is {depth}; the most is {MAX_JSON_DEPTH_CEILING}.",
                id="qprint.E010",
            )
        )

    memory = user.get("RENDER_MEMORY_BYTES", DEFAULTS["RENDER_MEMORY_BYTES"])
    if _is_int(memory) and 0 < memory < MIN_RENDER_MEMORY_BYTES:
        errors.append(
            checks.Error(
                f"QPRINT['RENDER_MEMORY_BYTES'] is {memory}; a render worker needs at least "
                f"{MIN_RENDER_MEMORY_BYTES} (64 MiB) to load PDFium.",
                hint="The default is 512 MiB; see docs/DOCUMENTS.md.",
                id="qprint.E021",
            )
        )

    ttl = user.get("JOB_TTL_SECONDS", DEFAULTS["JOB_TTL_SECONDS"])
    if ttl is not None and (not _is_int(ttl) or ttl <= 0):
        errors.append(
            checks.Error(
                f"QPRINT['JOB_TTL_SECONDS'] must be a positive integer or None, got {ttl!r}.",
                id="qprint.E004",
            )
        )
    types = user.get("ACCEPTED_CONTENT_TYPES", DEFAULTS["ACCEPTED_CONTENT_TYPES"])
    if (
        not isinstance(types, list | tuple | set | frozenset)
        or not types
        or not all(isinstance(t, str) and _MEDIA_TYPE.match(t.lower()) for t in types)
    ):
        errors.append(
            checks.Error(
                "QPRINT['ACCEPTED_CONTENT_TYPES'] must be a non-empty list of media types "
                f"such as 'application/pdf', got {types!r}.",
                hint="Without parameters (no '; charset=...'); see docs/API.md.",
                id="qprint.E008",
            )
        )
    errors.extend(_webhook_errors(user))
    errors.extend(_proxy_errors(user))
    backend = user.get("DOCUMENT_BACKEND", DEFAULTS["DOCUMENT_BACKEND"])
    try:
        import_string(backend)
    except Exception as exc:  # a malformed path raises ImportError, a non-string other errors
        errors.append(
            checks.Error(
                f"QPRINT['DOCUMENT_BACKEND'] = {backend!r} cannot be imported: {exc}.",
                id="qprint.E005",
            )
        )
    return errors


def _proxy_errors(user: dict[str, Any]) -> list[checks.CheckMessage]:
    proxies = user.get("TRUSTED_PROXIES", DEFAULTS["TRUSTED_PROXIES"])
    problem = None
    if not isinstance(proxies, list | tuple) or not all(isinstance(p, str) for p in proxies):
        problem = f"must be a list of addresses or networks, got {proxies!r}"
    else:
        for entry in proxies:
            try:
                ipaddress.ip_network(entry.strip(), strict=False)
            except ValueError:
                problem = f"has {entry!r}, not an address or a network"
                break
    if problem is None:
        return []
    return [
        checks.Error(
            f"QPRINT['TRUSTED_PROXIES'] {problem}.",
            hint="The proxies in front of the nodes, e.g. ['10.0.0.0/8']; see docs/SECURITY.md.",
            id="qprint.E020",
        )
    ]


def _webhook_errors(user: dict[str, Any]) -> list[checks.CheckMessage]:
    errors: list[checks.CheckMessage] = []
    allow_http = user.get("WEBHOOK_ALLOW_HTTP", DEFAULTS["WEBHOOK_ALLOW_HTTP"])
    if not isinstance(allow_http, bool):
        errors.append(
            checks.Error(
                f"QPRINT['WEBHOOK_ALLOW_HTTP'] must be True or False, got {allow_http!r}.",
                id="qprint.E007",
            )
        )
    hosts = user.get("WEBHOOK_ALLOWED_HOSTS", DEFAULTS["WEBHOOK_ALLOWED_HOSTS"])
    if not isinstance(hosts, list | tuple) or not all(isinstance(h, str) for h in hosts):
        errors.append(
            checks.Error(
                f"QPRINT['WEBHOOK_ALLOWED_HOSTS'] must be a list of strings, got {hosts!r}.",
                id="qprint.E007",
            )
        )
        return errors
    for host in hosts:
        text = host.strip()
        if "/" in text:
            try:
                ipaddress.ip_network(text, strict=False)
            except ValueError:
                errors.append(
                    checks.Error(
                        f"QPRINT['WEBHOOK_ALLOWED_HOSTS'] has {host!r}, not a network.",
                        hint="Use a host name, an address or a network such as 10.0.0.0/8.",
                        id="qprint.E007",
                    )
                )
        elif not text or any(c.isspace() for c in text):
            errors.append(
                checks.Error(
                    f"QPRINT['WEBHOOK_ALLOWED_HOSTS'] has {host!r}, not a host name or address.",
                    id="qprint.E007",
                )
            )
    return errors
