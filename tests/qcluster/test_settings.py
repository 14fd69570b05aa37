"""Runtime settings in ``cluster_setting``: seeded by the migration, refused when invalid."""

import dataclasses

import pytest
from django.core.exceptions import ValidationError

from qcluster import runtime_config
from qcluster.models import ClusterSetting


def test_migration_seeds_the_four_settings(db):
    assert dict(ClusterSetting.objects.values_list("key", "value")) == {
        "heartbeat_seconds": "15",
        "lost_after_seconds": "60",
        "retain_stopped_days": "7",
        "alert_on_lost": "true",
    }
    assert ClusterSetting.objects.load_config() == runtime_config.RuntimeConfig(15, 60, 7, True)
    assert runtime_config.RuntimeConfig(15, 60, 7, True) == runtime_config.DEFAULT


@pytest.mark.parametrize(
    ("key", "value", "reason"),
    [
        ("heartbeat_seconds", "0", "from 1 to 3600"),
        ("heartbeat_seconds", "-5", "from 1 to 3600"),
        # Past these bounds the sweep's dates would pass what the database holds.
        ("heartbeat_seconds", "3601", "from 1 to 3600"),
        ("lost_after_seconds", "1000000000000", "from 1 to 604800"),
        ("retain_stopped_days", "9999999", "from 1 to 3650"),
        ("heartbeat_seconds", "ten", "whole number"),
        ("heartbeat_seconds", "31", "at least twice"),
        ("lost_after_seconds", "29", "at least twice"),
        ("retain_stopped_days", "1.5", "whole number"),
        ("alert_on_lost", "maybe", "true or false"),
        ("surprise", "1", "Unknown cluster setting"),
    ],
)
def test_invalid_value_is_refused_on_save_with_the_reason(db, key, value, reason):
    with pytest.raises(ValidationError) as excinfo:
        ClusterSetting(key=key, value=value).save()

    assert reason in str(excinfo.value.message_dict["value"])
    stored = ClusterSetting.objects.filter(key=key).values_list("value", flat=True).first()
    assert stored != value


def test_valid_values_are_saved_normalised(db):
    ClusterSetting(key="alert_on_lost", value=" False ").save()
    ClusterSetting(key="heartbeat_seconds", value=" 20 ").save()

    assert ClusterSetting.objects.get(key="alert_on_lost").value == "false"
    assert ClusterSetting.objects.load_config().heartbeat_seconds == 20
    assert ClusterSetting.objects.load_config().alert_on_lost is False


def test_missing_or_broken_rows_fall_back_to_defaults():
    config = runtime_config.parse({"heartbeat_seconds": "abc", "lost_after_seconds": "1"})

    assert config.heartbeat_seconds == 15
    assert config.lost_after_seconds == 30  # never below two heartbeats


def test_every_setting_has_one_default_and_one_field():
    assert {f.name for f in dataclasses.fields(runtime_config.RuntimeConfig)} == set(
        runtime_config.SETTINGS
    )
    assert runtime_config.parse({}) == runtime_config.DEFAULT


def test_validation_is_pure_the_stored_values_are_passed_in():
    # No database here (no db fixture): the rule reads only what it is given.
    stored = {"heartbeat_seconds": "10", "lost_after_seconds": "60"}

    assert runtime_config.validate("lost_after_seconds", "20", stored) == "20"
    with pytest.raises(ValueError, match="at least twice"):
        runtime_config.validate("lost_after_seconds", "19", stored)
    with pytest.raises(ValueError, match="at least twice"):
        runtime_config.validate("heartbeat_seconds", "31", stored)
    with pytest.raises(ValueError, match="at least twice"):  # a missing row counts as its default
        runtime_config.validate("lost_after_seconds", "29", {})
