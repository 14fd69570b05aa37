"""Seed ``cluster_setting`` with the defaults (existing rows are left as the operator set them)."""

from django.db import migrations

SEEDS = {
    "heartbeat_seconds": ("15", "Every node writes its heartbeat this often (seconds)."),
    "lost_after_seconds": (
        "60",
        "A node whose last heartbeat is older than this is marked LOST (seconds, at least twice "
        "heartbeat_seconds).",
    ),
    "retain_stopped_days": ("7", "STOPPED and LOST nodes are deleted after this many days."),
    "alert_on_lost": ("true", "Mail the site admins when a node is lost (true/false)."),
}


def seed(apps, schema_editor):
    ClusterSetting = apps.get_model("qcluster", "ClusterSetting")
    for key, (value, description) in SEEDS.items():
        ClusterSetting.objects.get_or_create(
            key=key, defaults={"value": value, "description": description}
        )


def unseed(apps, schema_editor):
    ClusterSetting = apps.get_model("qcluster", "ClusterSetting")
    ClusterSetting.objects.filter(key__in=list(SEEDS)).delete()


class Migration(migrations.Migration):
    dependencies = [("qcluster", "0001_initial")]

    operations = [migrations.RunPython(seed, unseed)]
