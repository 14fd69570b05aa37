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
