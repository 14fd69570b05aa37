"""The example project as a whole: settings load, checks pass, the schema equals the migrations."""

import re
import sys
from io import StringIO

import pytest
from django.core.management import call_command

from tests.processes import REPO_ROOT, run_example_project


def test_system_checks_pass_on_example_project():
    out = StringIO()
    call_command("check", stdout=out)
    assert "no issues" in out.getvalue()


def test_models_and_migrations_are_in_step(db):
    out = StringIO()
    call_command("makemigrations", "--check", "--dry-run", stdout=out)
    assert "No changes detected" in out.getvalue()


def test_check_names_a_bad_heartbeat_from_the_environment():
    result = run_example_project("manage.py", "check", QPRINT_HEARTBEAT_SECONDS="abc")
    assert result.returncode != 0
    assert "qprint.E002" in result.stderr
    assert "'abc'" in result.stderr


def test_a_project_without_qcluster_is_told_to_add_it(tmp_path):
    """The URLs include qcluster.urls (docs/INSTALL.md), imported before any check runs: their
    import names the missing app (it was Django's error about a model outside any app)."""
    (tmp_path / "without_qcluster.py").write_text(
        "from example_project.settings import *  # noqa\n"
        "INSTALLED_APPS = [app for app in INSTALLED_APPS if app != 'qcluster']\n"
        "ROOT_URLCONF = 'guide_urls'\n"
    )
    (tmp_path / "guide_urls.py").write_text(  # the guide's urls.py
        "from django.urls import include, path\n"
        "urlpatterns = [\n"
        "    path('qprint/', include('qprint.urls')),\n"
        "    path('qcluster/', include('qcluster.urls')),\n"
        "]\n"
    )
    result = run_example_project(
        "manage.py",
        "check",
        DJANGO_SETTINGS_MODULE="without_qcluster",
        PYTHONPATH=f"{tmp_path}:{REPO_ROOT}",
    )
    assert result.returncode != 0
    assert "'qcluster' is not in INSTALLED_APPS" in result.stderr, result.stderr[-2000:]


def test_the_database_threads_and_the_expiry_period_come_from_the_environment():
    code = (
        "import django; django.setup(); from qprint.core.conf import qprint_settings as s; "
        "print(s.SOCKET_DB_THREADS, s.HTTP_DB_THREADS, s.EXPIRY_SECONDS)"
    )
    result = run_example_project(
        "-c",
        code,
        DEBUG="1",
        QPRINT_SOCKET_DB_THREADS="2",
        QPRINT_HTTP_DB_THREADS="6",
        QPRINT_EXPIRY_SECONDS="0.5",
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["2", "6", "0.5"]


CHECK_FREEZE = """
import gc, example_project.asgi
from channels.layers import channel_layers
layer = channel_layers.backends.get("default")
tracked = gc.get_objects()
print(gc.get_freeze_count(), len(tracked), type(layer).__name__, any(o is layer for o in tracked))
"""


@pytest.mark.parametrize("redis_url", ["", "redis://127.0.0.1:1/0"])
def test_the_asgi_module_leaves_what_start_up_made_out_of_full_collections(redis_url):
    """A node's full collections walk only the objects made after start-up: the example
    project's ASGI module freezes the rest, its channel layer made first (a node otherwise makes
    it at its first socket). Nothing connects to Redis for it (that port is closed)."""
    result = run_example_project("-c", CHECK_FREEZE, DEBUG="1", REDIS_URL=redis_url)
    assert result.returncode == 0, result.stderr
    frozen, tracked, layer, layer_tracked = result.stdout.split()
    assert int(frozen) > 50_000  # Django, the apps, Channels, qprint's routing
    assert int(tracked) < int(frozen) / 10
    assert layer == ("RedisPubSubChannelLayer" if redis_url else "InMemoryChannelLayer")
    assert layer_tracked == "False"  # made, then frozen with the rest


@pytest.mark.parametrize(
    ("value", "expected"), [("2000,10,10", "(2000, 10, 10)"), ("None", "None")]
)
def test_the_collectors_thresholds_come_from_the_environment(value, expected):
    code = (
        "import django; django.setup(); from qprint.core.conf import qprint_settings as s; "
        "print(s.GC_THRESHOLD)"
    )
    result = run_example_project("-c", code, DEBUG="1", QPRINT_GC_THRESHOLD=value)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == expected


def test_check_names_collector_thresholds_that_are_not_integers():
    result = run_example_project("manage.py", "check", QPRINT_GC_THRESHOLD="7000,ten,10")
    assert result.returncode != 0
    assert "qprint.E031" in result.stderr


def test_the_asgi_module_sets_the_collectors_thresholds_for_long_lived_sockets():
    """A node collects its youngest generation after 2,000 more allocations than frees, not
    Python's 700: full collections, which walk every socket's objects, run less often
    (docs/OPERATIONS.md, "Capacity")."""
    result = run_example_project(
        "-c", "import gc, example_project.asgi; print(*gc.get_threshold())", DEBUG="1"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["2000", "10", "10"]


@pytest.mark.parametrize(("setting", "expected"), [((1234, 5, 6), (1234, 5, 6)), (None, None)])
def test_freeze_start_up_sets_the_thresholds_of_the_setting_or_leaves_them(
    monkeypatch, settings, setting, expected
):
    import gc

    from qprint.routing import freeze_start_up

    before = gc.get_threshold()
    monkeypatch.setattr(gc, "freeze", lambda: None)  # this test process is no node
    monkeypatch.setattr(gc, "collect", lambda *args: 0)
    settings.QPRINT = {"GC_THRESHOLD": setting}
    try:
        freeze_start_up()
        assert gc.get_threshold() == (expected or before)
    finally:
        gc.set_threshold(*before)


@pytest.mark.parametrize("setting", [(0, 10, 10), "2000,10,10"])
def test_freeze_start_up_refuses_thresholds_the_check_names(monkeypatch, settings, setting):
    """A node does not start with thresholds that would turn collection off or that are not
    numbers: the error names the setting and the check, and nothing is frozen or set."""
    import gc

    from django.core.exceptions import ImproperlyConfigured

    from qprint.routing import freeze_start_up

    before = gc.get_threshold()
    monkeypatch.setattr(gc, "freeze", lambda: pytest.fail("froze"))
    settings.QPRINT = {"GC_THRESHOLD": setting}
    with pytest.raises(ImproperlyConfigured, match=r"GC_THRESHOLD.*qprint\.E031"):
        freeze_start_up()
    assert gc.get_threshold() == before


def test_the_distribution_ships_the_two_apps_and_not_the_example_project():
    import tomllib

    from tests.processes import REPO_ROOT

    setuptools = pytest.importorskip("setuptools")
    config = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    include = config["tool"]["setuptools"]["packages"]["find"]["include"]

    packages = setuptools.find_packages(str(REPO_ROOT), include=include)

    assert {p.split(".")[0] for p in packages} == {"qprint", "qcluster"}
    assert {"qprint.agent", "qcluster.migrations", "qcluster.templatetags"} <= set(packages)


def test_the_library_requires_only_what_its_apps_import():
    """The library requires what a node runs on (Django, Channels, channels-redis, Daphne,
    psycopg with its pool) and what its modules import; the example project's django-environ and
    psycopg's binary build are extras (docs/INSTALL.md, "Install"), and the test tools stay out
    of what the demo installs."""
    import ast
    import tomllib

    from tests.processes import REPO_ROOT

    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    required = " ".join(project["dependencies"]).lower()
    for optional in ("django-environ", "psycopg[binary"):
        assert optional not in required, f"{optional} belongs in an extra"
    for needed in ("channels-redis", "daphne", "psycopg[pool]"):
        assert needed in required, f"a node runs on {needed}"
    extras = project["optional-dependencies"]
    assert not any("pytest" in d for d in extras["example"]), "the demo installs no test tools"
    # The import names of the declared dependencies (and of Django's own asgiref).
    import_names = {"pillow": "PIL"}
    allowed = {"asgiref", "qprint", "qcluster"}
    for requirement in project["dependencies"]:
        dist = re.match(r"[A-Za-z0-9_.-]+", requirement)[0].lower()
        allowed.add(import_names.get(dist, dist.replace("-", "_")))
    imported: dict[str, str] = {}
    for app in ("qprint", "qcluster"):
        for path in (REPO_ROOT / app).rglob("*.py"):
            for node in ast.parse(path.read_text()).body:  # module level only
                names = []
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                for name in names:
                    imported.setdefault(name.split(".")[0], str(path.relative_to(REPO_ROOT)))
    third_party = {
        name: where
        for name, where in imported.items()
        if name not in sys.stdlib_module_names and name not in allowed
    }
    assert third_party == {}


def test_redis_py_parses_with_hiredis():
    """hiredis is a dependency so that redis-py parses with it (docs/INSTALL.md): redis-py takes
    it only from the versions it accepts, and otherwise falls back to its own parser without a
    word; a dependency range that let that happen would cost every wakeup."""
    import redis.asyncio.connection
    import redis.utils

    assert redis.utils.HIREDIS_AVAILABLE, "redis-py does not use the installed hiredis"
    assert redis.asyncio.connection.DefaultParser.__name__ == "_AsyncHiredisParser"


@pytest.mark.parametrize("secret_key", [None, ""])
def test_without_a_secret_key_and_debug_off_the_project_refuses_to_start(secret_key):
    """A key written in the settings is a key every reader of the code has: refuse instead."""
    import os
    import subprocess
    import sys

    from tests.processes import REPO_ROOT

    env = {k: v for k, v in os.environ.items() if k not in ("SECRET_KEY", "DEBUG")}
    env.update(
        {
            "DJANGO_SETTINGS_MODULE": "example_project.settings",
            "DATABASE_URL": "sqlite:////tmp/qprint-check.sqlite3",
        }
    )
    if secret_key is not None:
        env["SECRET_KEY"] = secret_key
    check = [sys.executable, str(REPO_ROOT / "manage.py"), "check"]
    refused = subprocess.run(check, env=env, capture_output=True, text=True, timeout=60)
    assert refused.returncode != 0
    assert "ImproperlyConfigured: SECRET_KEY is not set" in refused.stderr
    # A development node (DEBUG=1) starts with the built-in key; a set key starts anywhere.
    for extra in ({"DEBUG": "1"}, {"SECRET_KEY": "a-key-of-this-deployment"}):
        started = subprocess.run(
            check, env={**env, **extra}, capture_output=True, text=True, timeout=60
        )
        assert started.returncode == 0, started.stderr


def _pooled_session(**env_vars):
    """A process of the example project on the test's PostgreSQL (the pool on, as deployed):
    what its connection says of preparation and planning, one ``key=value`` per line."""
    from django.db import connection

    from tests.processes import database_url_of

    code = (
        "import django; django.setup()\n"
        "from django.db import connection\n"
        "with connection.cursor() as c:\n"
        "    c.execute('SHOW plan_cache_mode'); print('plan_cache_mode=' + c.fetchone()[0])\n"
        "print('prepare_threshold=%s' % connection.connection.prepare_threshold)\n"
    )
    return run_example_project(
        "-c",
        code,
        SECRET_KEY="test",
        DATABASE_URL=database_url_of(connection.settings_dict),
        DATABASE_POOL="on",
        **env_vars,
    )


@pytest.mark.services
@pytest.mark.django_db
@pytest.mark.parametrize(
    ("env_vars", "expected"),
    [
        ({}, ["plan_cache_mode=force_generic_plan", "prepare_threshold=0"]),
        ({"DATABASE_PLAN_CACHE_MODE": "auto"}, ["plan_cache_mode=auto", "prepare_threshold=0"]),
        ({"DATABASE_PREPARE_THRESHOLD": "5"}, ["plan_cache_mode=force_generic_plan",
                                               "prepare_threshold=5"]),
        ({"DATABASE_PREPARE_THRESHOLD": "off"}, ["plan_cache_mode=auto", "prepare_threshold=None"]),
    ],
)  # fmt: skip
def test_a_pooled_node_prepares_the_job_path_at_once_and_plans_it_once(env_vars, expected):
    """The example project's pooled connections prepare a server-bound statement at its first
    run and keep one generic plan for it (docs/PERFORMANCE.md, "Plans made once per
    connection"); each can be given back to psycopg's and PostgreSQL's defaults."""
    from django.db import connection

    if connection.vendor != "postgresql":
        pytest.skip("prepared statements and plan_cache_mode are PostgreSQL's")
    result = _pooled_session(**env_vars)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == expected


def test_a_plan_cache_mode_postgresql_does_not_know_is_refused_by_name():
    result = run_example_project(
        "-c",
        "import django; django.setup()",
        SECRET_KEY="test",
        DATABASE_URL="postgres://nobody@127.0.0.1:1/none",
        DATABASE_PLAN_CACHE_MODE="generic",
    )
    assert result.returncode != 0
    assert "DATABASE_PLAN_CACHE_MODE must be auto, force_generic_plan or force_custom_plan" in (
        result.stderr
    )
