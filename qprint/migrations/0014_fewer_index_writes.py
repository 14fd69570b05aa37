"""Fewer writes per job move (docs/PERFORMANCE.md, "Fewer index writes per job").

A job's status change is never a HOT update (the status is indexed), so every index of
``qprint_job`` is written at each of its moves. Three of them had no reader of their own: the
plain and ``LIKE`` indexes on ``tenant`` (replaced by ``qprint_job_tenant_idx``, tenant then newest
first, which the listing reads) and the full index on ``reprint_of`` (now partial: only reprints).
``qprint_job_event.job_id`` had an index beside ``qprint_job_event_job_idx``, which starts with it.
The event's ``device_id`` loses its foreign-key constraint, whose check locked the device's row at
every event's commit (the job's own key still holds the event to an existing job of that device).

The foreign keys are not dropped and added again (that would check every row of both tables under
a lock): only the indexes and the one constraint are dropped, by name.
"""

from django.db import migrations, models

#: (name, how to make it again) of each index dropped; None: PostgreSQL only.
_DROPPED = [
    ("qprint_job_tenant_12633d89", 'CREATE INDEX "{name}" ON "qprint_job" ("tenant")'),
    (
        "qprint_job_tenant_12633d89_like",
        'CREATE INDEX "{name}" ON "qprint_job" ("tenant" varchar_pattern_ops)',
    ),
    (
        "qprint_job_reprint_of_id_86a694c2",
        'CREATE INDEX "{name}" ON "qprint_job" ("reprint_of_id")',
    ),
    ("qprint_job_event_job_id_c97c7a7b", 'CREATE INDEX "{name}" ON "qprint_job_event" ("job_id")'),
]
_DEVICE_FK = "qprint_job_event_device_id_354c1649_fk_qprint_device_id"


def forwards(apps, schema_editor):
    for name, _ in _DROPPED:
        schema_editor.execute(f'DROP INDEX IF EXISTS "{name}"')
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(
            f'ALTER TABLE "qprint_job_event" DROP CONSTRAINT IF EXISTS "{_DEVICE_FK}"'
        )


def backwards(apps, schema_editor):
    postgresql = schema_editor.connection.vendor == "postgresql"
    for name, create in _DROPPED:
        if postgresql or not name.endswith("_like"):
            schema_editor.execute(create.format(name=name))
    if postgresql:
        schema_editor.execute(
            f'ALTER TABLE "qprint_job_event" ADD CONSTRAINT "{_DEVICE_FK}"'
            ' FOREIGN KEY ("device_id") REFERENCES "qprint_device" ("id")'
            " DEFERRABLE INITIALLY DEFERRED"
        )


class Migration(migrations.Migration):
    dependencies = [
        ("qprint", "0013_job_waited_until"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="printjob",
                    name="reprint_of",
                    field=models.ForeignKey(
                        blank=True,
                        db_index=False,
                        null=True,
                        on_delete=models.deletion.SET_NULL,
                        related_name="reprints",
                        to="qprint.printjob",
                        verbose_name="reprint of",
                    ),
                ),
                migrations.AlterField(
                    model_name="printjob",
                    name="tenant",
                    field=models.CharField(max_length=100, verbose_name="tenant"),
                ),
                migrations.AlterField(
                    model_name="printjobevent",
                    name="device",
                    field=models.ForeignKey(
                        blank=True,
                        db_constraint=False,
                        null=True,
                        on_delete=models.deletion.SET_NULL,
                        related_name="+",
                        to="qprint.device",
                        verbose_name="device",
                    ),
                ),
                migrations.AlterField(
                    model_name="printjobevent",
                    name="job",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=models.deletion.CASCADE,
                        related_name="events",
                        to="qprint.printjob",
                        verbose_name="job",
                    ),
                ),
            ],
            database_operations=[migrations.RunPython(forwards, backwards)],
        ),
        migrations.AddIndex(
            model_name="printjob",
            index=models.Index(
                models.F("tenant"),
                models.OrderBy(models.F("created_at"), descending=True),
                name="qprint_job_tenant_idx",
            ),
        ),
        migrations.AddIndex(
            model_name="printjob",
            index=models.Index(
                condition=models.Q(("reprint_of__isnull", False)),
                fields=["reprint_of"],
                name="qprint_job_reprint_idx",
            ),
        ),
    ]
