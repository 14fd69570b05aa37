"""Settings of the test suite: the example project on the services ``tests.services`` found.

Every test run gets a database of its own, so two runs on one server never meet.
"""

import os
import tempfile

import environ

from tests.services import resolve

SERVICES = resolve()
if SERVICES.database_url:
    os.environ["DATABASE_URL"] = SERVICES.database_url
else:
    os.environ.pop("DATABASE_URL", None)

# The example project refuses to start without a key when DEBUG is off; subprocesses inherit it.
os.environ.setdefault("SECRET_KEY", "test-secret-key")

from example_project.settings import *  # noqa: E402,F403

RUN_ID = f"{os.getpid()}"
if SERVICES.database_url:
    DATABASES = {"default": environ.Env.db_url_config(SERVICES.database_url)}
    DATABASES["default"]["TEST"] = {"NAME": f"test_qprint_{RUN_ID}"}
    if "postgresql" in DATABASES["default"]["ENGINE"]:
        # Django's backend, emptying the tables after a transactional test with DELETE rather
        # than TRUNCATE (tests/backends/postgresql/base.py).
        DATABASES["default"]["ENGINE"] = "tests.backends.postgresql"
        # Every statement the job path binds on the server is prepared at its first run and
        # planned once, generic, as on a pooled node of the example project (docs/PERFORMANCE.md,
        # "Prepared statements").
        DATABASES["default"]["OPTIONS"] = {
            "prepare_threshold": 0,
            "options": "-c plan_cache_mode=force_generic_plan",
        }
    if os.environ.get("QPRINT_TEST_POOL") == "on":
        # The nodes the tests start run the example project's pool; the test process itself
        # does not by default: tests that fork (qcluster's lease races) cannot share one.
        DATABASES["default"]["CONN_MAX_AGE"] = 0
        DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
            "min_size": 1,
            "max_size": 24,
            "timeout": 20,
        }
else:
    # A file, not :memory:, so threads and subprocesses of a test see the same database.
    DATABASES["default"]["TEST"] = {
        "NAME": os.path.join(tempfile.gettempdir(), f"test_qprint_{RUN_ID}.sqlite3")
    }

# The test process itself uses the in-memory layer; tests of the Redis path start their own
# layers and Daphne nodes against SERVICES.redis_url or a Redis of their own.
CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
# ... on purpose, so the check that warns about it on PostgreSQL is silenced here.
SILENCED_SYSTEM_CHECKS = ["qprint.W011"]
REDIS_URL = SERVICES.redis_url or ""

SECRET_KEY = "test-secret-key"
DEBUG = False
# The in-process scrapes of the tests read the database each time (tests of the cache set it).
METRICS_CACHE_SECONDS = 0
ALLOWED_HOSTS = ["*"]
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
