"""Indexes of the admin's print overview and of a device's recent jobs (docs/ADMIN.md).

On PostgreSQL they are built ``CONCURRENTLY``: the job table stays writable while nodes of the
previous version keep running (docs/ADMIN.md, "Upgrading"). Elsewhere, a plain ``CREATE INDEX``.
"""

from django.db import migrations, models


class AddIndexOnline(migrations.AddIndex):
    """``AddIndex``, built ``CONCURRENTLY`` on PostgreSQL (no import of
    ``django.contrib.postgres``: a host on SQLite has no PostgreSQL driver)."""

    def database_forwards(self, app_label, schema_editor, from_state, to_state):
        if schema_editor.connection.vendor != "postgresql":
            return super().database_forwards(app_label, schema_editor, from_state, to_state)
        model = to_state.apps.get_model(app_label, self.model_name)
        if self.allow_migrate_model(schema_editor.connection.alias, model):
            schema_editor.add_index(model, self.index, concurrently=True)

    def database_backwards(self, app_label, schema_editor, from_state, to_state):
        if schema_editor.connection.vendor != "postgresql":
            return super().database_backwards(app_label, schema_editor, from_state, to_state)
        model = from_state.apps.get_model(app_label, self.model_name)
        if self.allow_migrate_model(schema_editor.connection.alias, model):
            schema_editor.remove_index(model, self.index, concurrently=True)


class Migration(migrations.Migration):
    atomic = False  # CREATE INDEX CONCURRENTLY cannot run inside a transaction

    dependencies = [
        ("qprint", "0003_webhooks"),
    ]

    operations = [
        AddIndexOnline(
            model_name="printjob",
            index=models.Index(fields=["created_at", "status"], name="qprint_job_created_idx"),
        ),
        AddIndexOnline(
            model_name="printjob",
            index=models.Index(
                condition=models.Q(("status__in", ["FAILED", "OUTCOME_UNKNOWN"])),
                fields=["finished_at"],
                name="qprint_job_trouble_idx",
            ),
        ),
        AddIndexOnline(
            model_name="printjob",
            index=models.Index(
                condition=models.Q(("status", "QUEUED")),
                fields=["created_at"],
                name="qprint_job_queued_idx",
            ),
        ),
        AddIndexOnline(
            model_name="printjob",
            index=models.Index(
                models.F("device"),
                models.OrderBy(models.F("created_at"), descending=True),
                name="qprint_job_recent_idx",
            ),
        ),
    ]
