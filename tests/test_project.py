"""The example project as a whole: settings load, checks pass, the schema equals the migrations."""

from io import StringIO

import pytest
from django.core.management import call_command


def test_system_checks_pass_on_example_project():
    out = StringIO()
    call_command("check", stdout=out)
    assert "no issues" in out.getvalue()


def test_models_and_migrations_are_in_step(db):
    out = StringIO()
    call_command("makemigrations", "--check", "--dry-run", stdout=out)
    assert "No changes detected" in out.getvalue()


def test_check_names_a_bad_heartbeat_from_the_environment():
    import os
    import subprocess
    import sys

    from tests.processes import REPO_ROOT

    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "example_project.settings",
        "QPRINT_HEARTBEAT_SECONDS": "abc",
        "DATABASE_URL": "sqlite:////tmp/qprint-check.sqlite3",
    }
    result = subprocess.run(
        [sys.executable, str(REPO_ROOT / "manage.py"), "check"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    assert "qprint.E002" in result.stderr
    assert "'abc'" in result.stderr


def test_the_distribution_ships_the_two_apps_and_not_the_example_project():
    import tomllib

    from tests.processes import REPO_ROOT

    setuptools = pytest.importorskip("setuptools")
    config = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    include = config["tool"]["setuptools"]["packages"]["find"]["include"]

    packages = setuptools.find_packages(str(REPO_ROOT), include=include)

    assert {p.split(".")[0] for p in packages} == {"qprint", "qcluster"}
    assert {"qprint.agent", "qcluster.migrations", "qcluster.templatetags"} <= set(packages)


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
