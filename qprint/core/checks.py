"""System checks for the ``QPRINT`` settings (ids ``qprint.E0xx`` / ``qprint.W0xx``); each
setting's rule and id is declared with the setting in :mod:`qprint.core.conf`.

- ``qprint.E001``: ``QPRINT`` is not a dict.
- ``qprint.E002``: ``HEARTBEAT_SECONDS`` is not a number of at least 1.
- ``qprint.W001``: ``HEARTBEAT_SECONDS`` is below 5 (every device pings that often: load).
- ``qprint.E003``: a setting that must be a positive integer (or number of seconds) is not.
- ``qprint.E004``: ``JOB_TTL_SECONDS`` is neither a positive integer of at most a century nor
  ``None``.
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
- ``qprint.E031``: ``GC_THRESHOLD`` is neither ``None`` nor three positive integers (the garbage
  collector's thresholds a node sets in ``qprint.routing.freeze_start_up()``).

The deployment around qprint (docs/INSTALL.md):

- ``qprint.W010``: no channel layer (``CHANNEL_LAYERS`` unset): wakeups reach no device socket;
  devices find new jobs at their next heartbeat only.
- ``qprint.W011``: the in-memory channel layer with PostgreSQL: a set-up of several processes
  (nodes, ``cluster_runtime``, ``manage.py``) whose wakeups stay inside the process that sent them.
- ``qprint.W012``: ``ASGI_APPLICATION`` is unset: nothing tells Daphne's ``runserver`` where the
  project's ASGI application (with qprint's socket route) is.
- ``qprint.W013``: ``daphne`` is not in ``INSTALLED_APPS``: ``manage.py runserver`` is then
  Django's WSGI server, which serves no WebSocket (devices get 404 at the socket).
- ``qprint.W014``: a database that runs through Django's pool cannot be reached; the message is
  the database's own error, which the pool's timeout hides (:mod:`qprint.core.database`).
"""

from django.apps import apps
from django.conf import settings
from django.core import checks

from qprint.core.conf import DEFAULTS, qprint_settings


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
    """Each declared setting's rule (:mod:`qprint.core.conf`), the dict itself and unknown keys."""
    return qprint_settings.check()


IN_MEMORY_LAYER = "channels.layers.InMemoryChannelLayer"


def _heartbeat() -> object:
    value = qprint_settings.HEARTBEAT_SECONDS
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    return value if ok else DEFAULTS["HEARTBEAT_SECONDS"]


@checks.register()
def check_channel_layer(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    """A missing channel layer, or the in-memory one where several processes share PostgreSQL."""
    heartbeat = _heartbeat()
    layers = getattr(settings, "CHANNEL_LAYERS", None) or {}
    layer = layers.get("default") if isinstance(layers, dict) else None
    if not layer:
        return [
            checks.Warning(
                "No channel layer (CHANNEL_LAYERS['default'] is unset): a submitted job wakes no "
                f"device; each device finds its jobs at its next heartbeat (up to {heartbeat} s "
                "later), and a drain or a newer socket of the same device is noticed late.",
                hint="Use channels_redis.pubsub.RedisPubSubChannelLayer (docs/INSTALL.md, "
                "'Channel layer'); InMemoryChannelLayer does for one process on SQLite.",
                id="qprint.W010",
            )
        ]
    uses_postgresql = any(
        db.get("ENGINE", "").endswith("postgresql")
        for db in getattr(settings, "DATABASES", {}).values()
    )
    if layer.get("BACKEND") == IN_MEMORY_LAYER and uses_postgresql:
        return [
            checks.Warning(
                "The in-memory channel layer with PostgreSQL: each process has a layer of its "
                "own, so a job submitted in one process (another node, cluster_runtime, "
                "manage.py, a worker) does not wake a device connected to another; the device "
                f"finds it at its next heartbeat (up to {heartbeat} s later).",
                hint="Use channels_redis.pubsub.RedisPubSubChannelLayer on one Redis shared by "
                "every process (docs/INSTALL.md, 'Channel layer'). Silence this check only for "
                "a single process.",
                id="qprint.W011",
            )
        ]
    return []


@checks.register()
def check_asgi_server(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    """Where it can be told: nothing serves the device socket under ``manage.py runserver``."""
    found: list[checks.CheckMessage] = []
    if not getattr(settings, "ASGI_APPLICATION", None):
        found.append(
            checks.Warning(
                "ASGI_APPLICATION is unset: Daphne's runserver cannot find the project's ASGI "
                "application, which routes the device socket (qprint.routing).",
                hint="Set ASGI_APPLICATION = '<project>.asgi.application' (docs/INSTALL.md, "
                "'ASGI routing').",
                id="qprint.W012",
            )
        )
    if not apps.is_installed("daphne"):
        found.append(
            checks.Warning(
                "'daphne' is not in INSTALLED_APPS: manage.py runserver is Django's WSGI "
                "server, which serves no WebSocket; devices get 404 at the socket.",
                hint="Put 'daphne' first in INSTALLED_APPS (runserver then serves ASGI) and "
                "serve production with daphne (docs/INSTALL.md, 'Serving'). Another ASGI server "
                "(uvicorn) works too: then silence qprint.W013.",
                id="qprint.W013",
            )
        )
    return found


@checks.register()
def check_pooled_database(app_configs=None, databases=None, **kwargs) -> list[checks.CheckMessage]:
    """A pooled database that cannot be reached, named by its own error."""
    from qprint.core import database

    found: list[checks.CheckMessage] = []
    for alias in database.pooled_aliases():
        error = database.cause(alias)
        if error is not None:
            found.append(
                checks.Warning(
                    f"The database {alias!r} cannot be reached: {error}",
                    hint="Requests will fail with the pool's \"couldn't get a connection\"; "
                    "fix DATABASES (docs/INSTALL.md, 'PostgreSQL').",
                    id="qprint.W014",
                )
            )
    return found
