"""The admin of both apps (qprint and qcluster) as an attacker with a staff account would try it:

- the permission matrix: for every registered model, a staff user holding one permission alone
  (view, add, change, delete, and the custom ones such as ``drain_clusternode``) reaches exactly
  the pages that permission opens; with ``view`` plus one more, exactly the actions that need
  those; an action posted without its permission changes no row;
- CSRF is enforced on every action and on the change forms;
- a secret (a device token, an application key) appears on the one page that makes it, and never
  again in any page, message or log line.
"""

from __future__ import annotations

import logging

import pytest
from django.contrib import admin
from django.contrib.auth.models import Permission, User
from django.db import connection
from django.test import Client
from django.urls import reverse

from qcluster.models import ClusterAlert, ClusterLease, ClusterNode, ClusterSetting
from qprint import api
from qprint.models import ApplicationKey, Device
from tests.qprint.factories import connect

pytestmark = pytest.mark.django_db

APPS = ("qprint", "qcluster")
PDF = b"%PDF-1.4\n%%EOF\n"


def registered() -> list[tuple[type, admin.ModelAdmin]]:
    return sorted(
        (
            (model, model_admin)
            for model, model_admin in admin.site._registry.items()
            if model._meta.app_label in APPS
        ),
        key=lambda pair: pair[0]._meta.label,
    )


def codenames(model) -> list[str]:
    return sorted(
        Permission.objects.filter(
            content_type__app_label=model._meta.app_label,
            content_type__model=model._meta.model_name,
        ).values_list("codename", flat=True)
    )


def staff(*perms: tuple[str, str]) -> User:
    user = User.objects.create_user(f"staff-{User.objects.count()}", password="pw", is_staff=True)
    user.user_permissions.set(
        Permission.objects.filter(
            content_type__app_label__in=[a for a, _ in perms], codename__in=[c for _, c in perms]
        )
    )
    return user


@pytest.fixture
def rows(db):
    """One row of every model of both apps."""
    device, _ = api.create_device("acme", "front-desk")
    connect(device)
    job, _ = api.submit_job("acme", device, PDF, "application/pdf")
    api.send_command(device, "PING")
    api.create_application_key("acme", "backend")
    ClusterNode.objects.create(node_id="node-a", status="UP", roles="web")
    ClusterLease.objects.create(name="qprint.expire-jobs", holder_node_id="node-a")
    if not ClusterSetting.objects.exists():
        ClusterSetting.objects.create(key="heartbeat_seconds", value="5")
    ClusterAlert.objects.create(code="node_lost", node_id="node-a", message="lost")
    from qprint.domain import enrolment

    enrolment.start({"hostname": "shop-7"}, source="192.0.2.1")
    from qprint.models import WebhookDelivery, WebhookEndpoint

    endpoint = WebhookEndpoint.objects.create(
        tenant="acme", url="https://hooks.example.com/qprint", events=[], secret="s" * 40
    )
    WebhookDelivery.objects.create(
        endpoint=endpoint, event_id="event-1", type="job.finished", payload={}
    )
    return {"device": device, "job": job}


def every_row() -> str:
    """Every row of both apps' tables, as text (what an action must not change)."""
    chunks = []
    with connection.cursor() as cursor:
        for table in sorted(connection.introspection.table_names()):
            if table.startswith(("qprint_", "qcluster_")) and table != "qprint_auth_failure":
                cursor.execute(f"SELECT * FROM {connection.ops.quote_name(table)}")
                chunks.append(f"{table}: {sorted(map(repr, cursor.fetchall()))}")
    return "\n".join(chunks)


def url(model, view: str, *args) -> str:
    return reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_{view}", args=args)


def superuser_request(rf, user):
    request = rf.get("/")
    request.user = user
    return request


def kind_of(codename: str, model) -> str:
    """``view``/``add``/``change``/``delete`` for the default permissions, else the custom one
    without the model name (``drain``), as ``@admin.action(permissions=[...])`` names it."""
    return codename.removesuffix(f"_{model._meta.model_name}")


MATRIX = [
    (model._meta.label, codename)
    for model, _ in registered()
    for codename in sorted(
        {f"{p}_{model._meta.model_name}" for p in ("view", "add", "change", "delete")}
        | {c for c, _ in model._meta.permissions}
    )
]


@pytest.mark.parametrize(("label", "codename"), MATRIX, ids=[f"{m}-{c}" for m, c in MATRIX])
def test_one_permission_alone_opens_exactly_its_pages(client, rf, rows, label, codename):
    from django.apps import apps

    model = apps.get_model(label)
    model_admin = admin.site._registry[model]
    root = User.objects.create_superuser("root", password="pw")
    can = {
        "view": model_admin.has_view_permission(superuser_request(rf, root)),
        "add": model_admin.has_add_permission(superuser_request(rf, root)),
        "change": model_admin.has_change_permission(superuser_request(rf, root)),
        "delete": model_admin.has_delete_permission(superuser_request(rf, root)),
    }
    user = staff((model._meta.app_label, codename))
    client.force_login(user)
    kind = kind_of(codename, model)
    sees_list = kind in ("view", "change") and (can["view"] or can["change"])
    assert client.get(url(model, "changelist")).status_code == (200 if sees_list else 403)
    assert client.get(url(model, "add")).status_code == (
        200 if kind == "add" and can["add"] else 403
    )
    obj = model._default_manager.first()
    assert obj is not None, f"no {label} row to try"
    change = client.get(url(model, "change", obj.pk))
    assert change.status_code == (200 if sees_list else 403)
    before = every_row()
    # Deleting a row also deletes what cascades from it: that needs those models' permissions.
    _, _, perms_needed, protected = model_admin.get_deleted_objects(
        [obj], superuser_request(rf, user)
    )
    delete = client.post(url(model, "delete", obj.pk), {"post": "yes"})
    if kind == "delete" and can["delete"] and not perms_needed and not protected:
        assert delete.status_code == 302
        assert not model._default_manager.filter(pk=obj.pk).exists()
    else:
        assert delete.status_code == 403
        assert every_row() == before


ACTION_MATRIX = [
    (model._meta.label, codename)
    for model, _ in registered()
    for codename in sorted(
        {f"{p}_{model._meta.model_name}" for p in ("change", "delete")}
        | {c for c, _ in model._meta.permissions}
    )
]


@pytest.mark.parametrize(
    ("label", "codename"), ACTION_MATRIX, ids=[f"{m}-view+{c}" for m, c in ACTION_MATRIX]
)
def test_view_and_one_permission_offer_exactly_the_actions_that_need_them(
    client, rf, rows, label, codename
):
    from django.apps import apps

    model = apps.get_model(label)
    model_admin = admin.site._registry[model]
    root = User.objects.create_superuser("root", password="pw")
    every_action = model_admin.get_actions(superuser_request(rf, root))
    user = staff(
        (model._meta.app_label, f"view_{model._meta.model_name}"),
        (model._meta.app_label, codename),
    )
    held = {"view", kind_of(codename, model)}
    request = superuser_request(rf, user)

    def allowed(permission: str) -> bool:
        # A custom action permission ("retry") is the admin's has_<name>_permission; the
        # default ones are the Django permission of that kind.
        if permission in ("view", "add", "change", "delete"):
            return permission in held
        return getattr(model_admin, f"has_{permission}_permission")(request)

    expected = {
        name
        for name, (func, _, _) in every_action.items()
        if all(allowed(p) for p in getattr(func, "allowed_permissions", ()))
    }
    offered = set(model_admin.get_actions(request))
    assert offered == expected
    client.force_login(user)
    selected = [str(pk) for pk in model._default_manager.values_list("pk", flat=True)]
    for name in sorted(set(every_action) - offered):
        before = every_row()
        answer = client.post(
            url(model, "changelist"), {"action": name, "_selected_action": selected}
        )
        assert answer.status_code in (200, 302, 403), name
        assert every_row() == before, f"{name} ran for a user without its permission"


def test_every_action_and_change_form_enforces_csrf(rf, rows):
    root = User.objects.create_superuser("root", password="pw")
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(root)
    before = every_row()
    for model, model_admin in registered():
        selected = [str(pk) for pk in model._default_manager.values_list("pk", flat=True)]
        for name in model_admin.get_actions(superuser_request(rf, root)):
            answer = browser.post(
                url(model, "changelist"),
                {"action": name, "_selected_action": selected, "post": "yes"},
            )
            assert answer.status_code == 403, (model._meta.label, name)
        obj = model._default_manager.first()
        assert browser.post(url(model, "change", obj.pk), {}).status_code == 403
        assert browser.post(url(model, "delete", obj.pk), {"post": "yes"}).status_code == 403
        assert browser.post(url(model, "add"), {}).status_code == 403
    assert every_row() == before


def test_secrets_are_shown_once_and_never_again_in_any_page_message_or_log(
    admin_client, rows, caplog
):
    caplog.set_level(logging.DEBUG)
    shown = []
    made = admin_client.post(
        url(Device, "add"),
        {"tenant": "acme", "name": "new-desk", "kind": "agent", "description": "", "enabled": "on"},
    )
    shown.append(made.content.decode())
    added = Device.objects.get(name="new-desk")
    rotated = admin_client.post(
        url(Device, "changelist"),
        {"action": "issue_new_tokens", "_selected_action": [str(added.pk)]},
    )
    shown.append(rotated.content.decode())
    key_page = admin_client.post(url(ApplicationKey, "add"), {"tenant": "acme", "name": "ci"})
    shown.append(key_page.content.decode())
    secrets = {
        secret for page in (made, rotated, key_page) for _, secret in page.context["secrets"]
    }
    assert len(secrets) == 3
    for page, text in zip((made, rotated, key_page), shown, strict=True):
        assert any(secret in text for _, secret in page.context["secrets"])
    # Everything the admin shows afterwards, and every log line of the whole test.
    later = []
    for model, _ in registered():
        later.append(admin_client.get(url(model, "changelist"), follow=True))
        for obj in model._default_manager.all()[:5]:
            later.append(admin_client.get(url(model, "change", obj.pk), follow=True))
            later.append(admin_client.get(url(model, "history", obj.pk), follow=True))
    later.append(admin_client.get(reverse("admin:index")))
    texts = [r.content.decode() for r in later]
    for response in later:
        texts.extend(str(m) for m in (response.context or {}).get("messages", []))
    texts.append(caplog.text)
    everything = "\n".join(texts)
    for secret in secrets:
        assert secret not in everything


def secret_columns(model) -> list[str]:
    """The model's columns that keep a secret or its hash, by their names."""
    return [
        field.name
        for field in model._meta.concrete_fields
        if field.name == "secret" or field.name.endswith(("_secret", "_hash"))
    ]


SECRET_LOOKUPS = [
    (model._meta.label, column) for model, _ in registered() for column in secret_columns(model)
]


@pytest.mark.parametrize(
    ("label", "column"), SECRET_LOOKUPS, ids=[f"{m}-{c}" for m, c in SECRET_LOOKUPS]
)
def test_no_changelist_takes_a_lookup_on_a_secret_column(admin_client, rows, label, column):
    """``?secret__startswith=whsec_a`` would list a row only when the guess is a prefix of its
    secret: anyone who may see the list would read the secret a character at a time. Refused."""
    from django.apps import apps

    model = apps.get_model(label)
    changelist = url(model, "changelist")
    own_page = (
        type(admin.site._registry[model]).changelist_view is not admin.ModelAdmin.changelist_view
    )
    for lookup in (f"{column}__startswith", column, f"{column}__gt"):
        answer = admin_client.get(changelist, {lookup: "zz"})
        if own_page:  # a page of its own ("Enrol a device"): it reads no lookup at all
            assert answer.status_code == 200 and "shop-7" in answer.content.decode()
        else:
            assert answer.status_code == 400, (lookup, answer.status_code)
    assert admin_client.get(changelist).status_code == 200


def test_every_secret_column_is_known():
    """The columns the lookup test covers: a secret column added later is found by its name."""
    assert sorted(SECRET_LOOKUPS) == [
        ("qprint.ApplicationKey", "key_hash"),
        ("qprint.Device", "token_hash"),
        ("qprint.Enrolment", "device_code_hash"),
        ("qprint.Enrolment", "user_code_hash"),
        ("qprint.WebhookEndpoint", "previous_secret"),
        ("qprint.WebhookEndpoint", "secret"),
    ]
