"""The example project as a whole: settings load, checks pass, the schema equals the migrations."""

from io import StringIO

from django.core.management import call_command


def test_system_checks_pass_on_example_project():
    out = StringIO()
    call_command("check", stdout=out)
    assert "no issues" in out.getvalue()


def test_models_and_migrations_are_in_step(db):
    out = StringIO()
    call_command("makemigrations", "--check", "--dry-run", stdout=out)
    assert "No changes detected" in out.getvalue()
