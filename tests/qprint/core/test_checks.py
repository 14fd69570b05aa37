"""``manage.py check`` names a bad ``QPRINT`` value (qprint.E0xx / W0xx)."""

import pytest
from django.test import override_settings

from qprint.core.checks import check_qprint_settings


def ids(**qprint) -> list[str]:
    with override_settings(QPRINT=qprint):
        return [m.id for m in check_qprint_settings()]


def test_defaults_pass():
    assert ids() == []


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (0.5, ["qprint.E002"]),
        (0, ["qprint.E002"]),
        ("20", ["qprint.E002"]),
        (3, ["qprint.W001"]),
        (5, []),
        (20, []),
    ],
)
def test_heartbeat_below_five_warns_below_one_errs(value, expected):
    assert ids(HEARTBEAT_SECONDS=value) == expected


@pytest.mark.parametrize(
    "key",
    [
        "MAX_DOCUMENT_BYTES",
        "WAKE_QUEUE_SIZE",
        "JOB_RETENTION_DAYS",
        "ENROLMENT_EXPIRES_SECONDS",
        "ENROLMENT_INTERVAL_SECONDS",
        "ENROLMENT_PENDING_PER_ADDRESS",
    ],
)
@pytest.mark.parametrize("value", [0, -1, "10", None, True])
def test_positive_integers(key, value):
    assert ids(**{key: value}) == ["qprint.E003"]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, []),
        ("https://print.example.com/admin/qprint/enrolment/", []),
        ("/admin/qprint/enrolment/", ["qprint.E014"]),
        (5, ["qprint.E014"]),
    ],
)
def test_the_enrolment_page_is_an_absolute_url(value, expected):
    assert ids(ENROLMENT_VERIFICATION_URI=value) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, []),
        ((700, 10, 10), []),
        ([7000, 10, 10], []),
        ((0, 10, 10), ["qprint.E031"]),  # 0 would turn automatic collection off
        ((7000, 10), ["qprint.E031"]),
        ((7000.0, 10, 10), ["qprint.E031"]),
        ("7000", ["qprint.E031"]),
    ],
)
def test_the_collector_thresholds_are_three_positive_integers_or_none(value, expected):
    assert ids(GC_THRESHOLD=value) == expected


def test_job_ttl_may_be_none_but_not_zero():
    assert ids(JOB_TTL_SECONDS=None) == []
    assert ids(JOB_TTL_SECONDS=0) == ["qprint.E004"]


def test_an_unknown_key_is_named():
    with override_settings(QPRINT={"HEARTBEAT_SECOND": 20}):
        messages = check_qprint_settings()
    assert [m.id for m in messages] == ["qprint.W002"]
    assert "HEARTBEAT_SECOND" in messages[0].msg


def test_qprint_must_be_a_dict():
    with override_settings(QPRINT=[("HEARTBEAT_SECONDS", 20)]):
        assert [m.id for m in check_qprint_settings()] == ["qprint.E001"]


def test_a_document_backend_that_cannot_be_imported_is_named():
    assert ids(DOCUMENT_BACKEND="qprint.documents.Nowhere") == ["qprint.E005"]
    assert ids(DOCUMENT_BACKEND="qprint.documents.StorageDocuments") == []


def test_qprint_without_qcluster_starts_and_check_names_what_is_missing(settings):
    from django.apps import apps

    from qprint.core.checks import check_qcluster_installed

    assert check_qcluster_installed() == []
    without = [app for app in settings.INSTALLED_APPS if app != "qcluster"]
    with override_settings(INSTALLED_APPS=without):
        assert not apps.is_installed("qcluster")
        messages = check_qcluster_installed()
    assert [m.id for m in messages] == ["qprint.E006"]
    assert "INSTALLED_APPS" in messages[0].msg


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        ({"WEBHOOK_ALLOW_HTTP": True, "WEBHOOK_ALLOWED_HOSTS": ["10.0.0.0/8", "hooks.lan"]}, []),
        ({"WEBHOOK_ALLOW_HTTP": "yes"}, ["qprint.E007"]),
        ({"WEBHOOK_ALLOWED_HOSTS": "127.0.0.1"}, ["qprint.E007"]),
        ({"WEBHOOK_ALLOWED_HOSTS": ["10.0.0.0/33"]}, ["qprint.E007"]),
        ({"WEBHOOK_MAX_IN_FLIGHT": 0}, ["qprint.E003"]),
    ],
)
def test_webhook_settings_are_checked(settings, expected):
    assert ids(**settings) == expected


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        ({"TRUSTED_PROXIES": ["10.0.0.0/8", "192.0.2.1", "2001:db8::/32"]}, []),
        ({"TRUSTED_PROXIES": "10.0.0.0/8"}, ["qprint.E020"]),
        ({"TRUSTED_PROXIES": ["ingress.local"]}, ["qprint.E020"]),
        ({"TRUSTED_PROXIES": ["10.0.0.0/33"]}, ["qprint.E020"]),
        ({"MAX_WAITS_PER_KEY": 0}, ["qprint.E003"]),
    ],
)
def test_the_trusted_proxies_and_the_wait_cap_are_checked(settings, expected):
    assert ids(**settings) == expected


@pytest.mark.parametrize(
    "key",
    ["RENDER_WORKERS", "RENDER_MAX_PAGES", "RENDER_MAX_PIXELS", "RENDER_CACHE_BYTES"],
)
def test_render_bounds_must_be_positive_integers(key):
    assert ids(**{key: 0}) == ["qprint.E003"]
    assert ids(**{key: "5"}) == ["qprint.E003"]


@pytest.mark.parametrize(
    ("value", "expected"), [(0, ["qprint.E003"]), ("30", ["qprint.E003"]), (0.5, [])]
)
def test_the_expiry_period_is_a_positive_number_of_seconds(value, expected):
    assert ids(EXPIRY_SECONDS=value) == expected


def test_render_memory_below_what_pdfium_needs_is_named():
    assert ids(RENDER_MEMORY_BYTES=32 * 1024 * 1024) == ["qprint.E021"]
    assert ids(RENDER_MEMORY_BYTES=0) == ["qprint.E003"]
    assert ids(RENDER_MEMORY_BYTES=256 * 1024 * 1024) == []
    assert ids(RENDER_TIMEOUT_SECONDS=0) == ["qprint.E003"]
    assert ids(RENDER_TIMEOUT_SECONDS=0.5) == []


def _declared():
    from qcluster.conf import SETTINGS as CLUSTER_SETTINGS
    from qcluster.conf import cluster_settings
    from qprint.core.conf import SETTINGS, qprint_settings

    return [(qprint_settings, s) for s in SETTINGS] + [
        (cluster_settings, s) for s in CLUSTER_SETTINGS
    ]


@pytest.mark.parametrize(
    ("app", "declared"), _declared(), ids=lambda x: getattr(x, "name", getattr(x, "setting", ""))
)
def test_each_declared_setting_has_its_doc_and_its_rule_is_checked(app, declared):
    """One declaration per setting: its default passes its own rule, and a value of no sensible
    type is named by the setting's own check id (the checks loop over the declarations)."""
    assert declared.doc
    assert app.defaults[declared.name] == declared.default
    with override_settings(**{app.setting: {}}):
        assert [m.id for m in app.check()] == []
    if declared.valid is None:
        return
    with override_settings(**{app.setting: {declared.name: object()}}):
        messages = app.check()
    assert [m.id for m in messages] == [declared.error]
    assert declared.name in messages[0].msg
