"""Settings of the example project, read from the environment with django-environ.

Unset, everything is embedded: SQLite next to ``manage.py`` and the in-memory channel layer, one
node. ``DATABASE_URL`` (PostgreSQL) and ``REDIS_URL`` (channels-redis) make it a cluster node.
"""

from pathlib import Path

import environ
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env()

DEBUG = env.bool("DEBUG", default=False)
# Required with DEBUG off: a key everybody can read (a default written here) would let anyone sign
# sessions, password-reset links and signed cursors, so the project refuses to start instead.
SECRET_KEY = env.str("SECRET_KEY", default="")
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured(
            "SECRET_KEY is not set. Set it in the environment to a long random value (e.g. "
            "python -c 'import secrets; print(secrets.token_urlsafe(50))'), or set DEBUG=1 for a "
            "development node with an insecure built-in key."
        )
    SECRET_KEY = "insecure-example-key-change-me"
# Required in production: with DEBUG off and ALLOWED_HOSTS unset, Django answers 400 to every
# request (and `manage.py check --deploy` says so) instead of guessing host names.
ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["*"] if DEBUG else [])

INSTALLED_APPS = [
    "daphne",
    "qcluster",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "channels",
    "qprint",
]

# Django's own middleware, run on the event loop without a thread hop per hook under ASGI
# (example_project/middleware.py; docs/PERFORMANCE.md, "Per request").
MIDDLEWARE = [
    "example_project.middleware.SecurityMiddleware",
    "example_project.middleware.SessionMiddleware",
    "example_project.middleware.CommonMiddleware",
    "example_project.middleware.CsrfViewMiddleware",
    "example_project.middleware.AuthenticationMiddleware",
    "example_project.middleware.MessageMiddleware",
    "example_project.middleware.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "example_project.urls"
ASGI_APPLICATION = "example_project.asgi.application"
WSGI_APPLICATION = None

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        # The project's own templates: its admin index adds qcluster's nodes widget.
        "DIRS": [Path(__file__).resolve().parent / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DATABASES = {"default": env.db("DATABASE_URL", default=f"sqlite:///{BASE_DIR / 'db.sqlite3'}")}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # One writer at a time, taken at BEGIN: the claim and the event recording run the same code
    # as on PostgreSQL and cannot deadlock on a lock upgrade.
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        {"transaction_mode": "IMMEDIATE", "timeout": 20}
    )
else:
    # Django's psycopg pool (docs/PERFORMANCE.md, "Connections"): a request, and each statement
    # of the device sockets' threads, takes an open connection from the process's pool and gives
    # it back, so no request opens a database connection. DATABASE_POOL_MAX_SIZE bounds the
    # connections of each process. DATABASE_POOL=off for PgBouncer in transaction mode (the pool
    # would hold server connections PgBouncer already pools); then CONN_MAX_AGE applies (0: a
    # connection per request, Django's advice under ASGI). A pool requires CONN_MAX_AGE = 0.
    DATABASES["default"]["CONN_MAX_AGE"] = env.int("CONN_MAX_AGE", default=0)
    if env.bool("DATABASE_POOL", default=True):
        pool_max = env.int("DATABASE_POOL_MAX_SIZE", default=10)
        DATABASES["default"]["CONN_MAX_AGE"] = 0
        DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
            "min_size": min(env.int("DATABASE_POOL_MIN_SIZE", default=2), pool_max),
            "max_size": pool_max,
            # A request waits this long for a free connection (or for the database to answer
            # again), then answers 503: a node cut off from its database fails fast, and a
            # socket upgrade (which may wait twice: drain status, token) fails with 500 before
            # Daphne's 5 s handshake timeout.
            "timeout": env.float("DATABASE_POOL_TIMEOUT", default=1.5),
        }
        # Server-side prepared statements (docs/PERFORMANCE.md, "Prepared statements"): the job
        # path's statements are prepared on a pooled connection after this many runs on it (0:
        # at the first), and planned once there: their parameters are keys (ids, token hashes),
        # so the generic plan is the plan, and planning one cost PostgreSQL more than running it
        # ("Plans made once per connection"). Django turns preparation off by default for
        # PgBouncer in transaction mode (DATABASE_POOL=off keeps that default;
        # DATABASE_PREPARE_THRESHOLD=off turns it off here too; DATABASE_PLAN_CACHE_MODE=auto
        # gives PostgreSQL's own choice back: five custom plans per connection first).
        threshold = env.str("DATABASE_PREPARE_THRESHOLD", default="0").strip().lower()
        if threshold != "off":
            if not threshold.isdigit():
                raise ImproperlyConfigured(
                    f"DATABASE_PREPARE_THRESHOLD must be a whole number or off, not {threshold!r}"
                )
            DATABASES["default"]["OPTIONS"]["prepare_threshold"] = int(threshold)
            plan_cache = env.str("DATABASE_PLAN_CACHE_MODE", default="force_generic_plan")
            if plan_cache not in ("auto", "force_generic_plan", "force_custom_plan"):
                raise ImproperlyConfigured(
                    "DATABASE_PLAN_CACHE_MODE must be auto, force_generic_plan or "
                    f"force_custom_plan, not {plan_cache!r}"
                )
            if plan_cache != "auto":
                DATABASES["default"]["OPTIONS"]["options"] = f"-c plan_cache_mode={plan_cache}"

REDIS_URL = env.str("REDIS_URL", default="")
if REDIS_URL:
    # Wakeups between nodes (docs/REALTIME.md, "The channel layer"). The pub/sub layer by
    # default: it reconnects and resubscribes after a Redis restart and has no group expiry;
    # the core layer (QPRINT_CHANNEL_LAYER=core) crashes consumers on a Redis restart, which
    # qprint's bus survives. socket_timeout=None: redis-py 8's default 5 s timeout breaks the
    # core layer's idle blocking read.
    if env.str("QPRINT_CHANNEL_LAYER", default="pubsub") == "core":
        CHANNEL_LAYERS = {
            "default": {
                "BACKEND": "channels_redis.core.RedisChannelLayer",
                "CONFIG": {
                    "hosts": [{"address": REDIS_URL, "socket_timeout": None}],
                    "group_expiry": env.int("QPRINT_GROUP_EXPIRY", default=86400),
                },
            }
        }
    else:
        CHANNEL_LAYERS = {
            "default": {
                "BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer",
                "CONFIG": {
                    "hosts": [
                        {"address": REDIS_URL, "socket_timeout": None, "socket_connect_timeout": 2}
                    ]
                },
            }
        }
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "var" / "static"

ADMINS = [("Operations", a) for a in env.list("ADMINS", default=[])]
EMAIL_BACKEND = env.str("EMAIL_BACKEND", default="django.core.mail.backends.console.EmailBackend")

# /metrics (example_project/views.py): open when METRICS_TOKEN is unset (a development node);
# set, only `Authorization: Bearer <METRICS_TOKEN>` gets it. The database figures are collected at
# most once per METRICS_CACHE_SECONDS, however often it is scraped.
METRICS_TOKEN = env.str("METRICS_TOKEN", default="")
METRICS_CACHE_SECONDS = env.float("METRICS_CACHE_SECONDS", default=5.0)

QPRINT = {}
if env.str("QPRINT_HEARTBEAT_SECONDS", default=""):
    # Passed on as written when it is not a number, so `manage.py check` names the bad value.
    try:
        QPRINT["HEARTBEAT_SECONDS"] = float(env.str("QPRINT_HEARTBEAT_SECONDS"))
    except ValueError:
        QPRINT["HEARTBEAT_SECONDS"] = env.str("QPRINT_HEARTBEAT_SECONDS")
    else:
        if QPRINT["HEARTBEAT_SECONDS"].is_integer():
            QPRINT["HEARTBEAT_SECONDS"] = int(QPRINT["HEARTBEAT_SECONDS"])
if env.str("QPRINT_OVERVIEW_REFRESH_SECONDS", default=""):
    QPRINT["OVERVIEW_REFRESH_SECONDS"] = env.int("QPRINT_OVERVIEW_REFRESH_SECONDS")

if env.str("QPRINT_WEBHOOK_ALLOW_HTTP", default=""):
    QPRINT["WEBHOOK_ALLOW_HTTP"] = env.bool("QPRINT_WEBHOOK_ALLOW_HTTP")
if env.str("QPRINT_WEBHOOK_ALLOWED_HOSTS", default=""):
    QPRINT["WEBHOOK_ALLOWED_HOSTS"] = env.list("QPRINT_WEBHOOK_ALLOWED_HOSTS")

for _name in ("ENROLMENT_EXPIRES_SECONDS", "ENROLMENT_INTERVAL_SECONDS"):
    if env.str(f"QPRINT_{_name}", default=""):
        QPRINT[_name] = env.int(f"QPRINT_{_name}")
if env.str("QPRINT_AUTH_FAILURE_LIMIT", default=""):
    QPRINT["AUTH_FAILURE_LIMIT"] = env.int("QPRINT_AUTH_FAILURE_LIMIT")
# The proxies in front of the nodes: behind them the client is the rightmost X-Forwarded-For
# address that is not one of them (docs/SECURITY.md, "The client's address"). Run Daphne without
# --proxy-headers, which would take the leftmost one, written by the client.
if env.str("QPRINT_TRUSTED_PROXIES", default=""):
    QPRINT["TRUSTED_PROXIES"] = env.list("QPRINT_TRUSTED_PROXIES")
# Behind a TLS-terminating proxy that sets X-Forwarded-Proto (and that alone reaches the nodes).
if env.bool("TRUST_X_FORWARDED_PROTO", default=False):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")

# Documents (docs/DOCUMENTS.md): the render workers' bounds.
if env.str("QPRINT_RENDER_TIMEOUT_SECONDS", default=""):
    QPRINT["RENDER_TIMEOUT_SECONDS"] = env.float("QPRINT_RENDER_TIMEOUT_SECONDS")
if env.str("QPRINT_RENDER_WORKERS", default=""):
    QPRINT["RENDER_WORKERS"] = env.int("QPRINT_RENDER_WORKERS")

# The garbage collector's thresholds a node sets (docs/OPERATIONS.md, "Capacity"): three integers
# separated by commas, or "none" for the interpreter's own.
if env.str("QPRINT_GC_THRESHOLD", default=""):
    _thresholds = env.str("QPRINT_GC_THRESHOLD")
    try:
        QPRINT["GC_THRESHOLD"] = (
            None
            if _thresholds.strip().lower() == "none"
            else tuple(int(v) for v in _thresholds.split(","))
        )
    except ValueError:
        QPRINT["GC_THRESHOLD"] = _thresholds  # named by `manage.py check` (qprint.E031)

# Each process's database threads (docs/OPERATIONS.md, "PostgreSQL") and the expiry task's period.
for _name in ("SOCKET_DB_THREADS", "HTTP_DB_THREADS"):
    if env.str(f"QPRINT_{_name}", default=""):
        QPRINT[_name] = env.int(f"QPRINT_{_name}")
if env.str("QPRINT_EXPIRY_SECONDS", default=""):
    QPRINT["EXPIRY_SECONDS"] = env.float("QPRINT_EXPIRY_SECONDS")

# CloudPRNT printers (docs/CLOUDPRNT.md).
if env.str("QPRINT_CLOUDPRNT_CONFIRM_SECONDS", default=""):
    QPRINT["CLOUDPRNT_CONFIRM_SECONDS"] = env.float("QPRINT_CLOUDPRNT_CONFIRM_SECONDS")
if env.str("QPRINT_CLOUDPRNT_POLL_SECONDS", default=""):
    QPRINT["CLOUDPRNT_POLL_SECONDS"] = env.float("QPRINT_CLOUDPRNT_POLL_SECONDS")

QCLUSTER = {}
if env.str("QCLUSTER_DRAIN_GRACE_SECONDS", default=""):
    QCLUSTER["DRAIN_GRACE_SECONDS"] = env.int("QCLUSTER_DRAIN_GRACE_SECONDS")
if env.str("QCLUSTER_WIDGET_REFRESH_SECONDS", default=""):
    QCLUSTER["WIDGET_REFRESH_SECONDS"] = env.int("QCLUSTER_WIDGET_REFRESH_SECONDS")

# Logs: `event key=value` lines by default, JSON lines with LOG_FORMAT=json (docs/OPERATIONS.md).
LOG_FORMAT = env.str("LOG_FORMAT", default="keyvalue") or "keyvalue"
if LOG_FORMAT not in ("keyvalue", "json"):
    raise ImproperlyConfigured(f"LOG_FORMAT must be keyvalue or json, not {LOG_FORMAT!r}.")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "keyvalue": {"()": "qprint.core.logs.KeyValueFormatter"},
        "json": {"()": "qprint.core.logs.JsonFormatter"},
    },
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": "json" if LOG_FORMAT == "json" else "keyvalue",
        }
    },
    "root": {"handlers": ["console"], "level": env.str("LOG_LEVEL", default="INFO")},
    "loggers": {
        "django": {"level": "WARNING"},
        # A 409 from a closed claim gate is an answer, not an incident: log 5xx only.
        "django.request": {"level": "ERROR"},
        "daphne": {"level": "WARNING"},
    },
}
