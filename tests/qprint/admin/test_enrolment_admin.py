"""The admin's "Enrol a device" page without a browser: who may see it, who may decide, and
that the token never appears on it (the browser test: tests/qprint/agent/
test_enrolment_end_to_end.py)."""

import pytest
from django.contrib.auth.models import Permission, User

from qprint.domain import enrolment
from qprint.models import Device, Enrolment

pytestmark = pytest.mark.django_db

PAGE = "/admin/qprint/enrolment/"


def staff(*codenames: str) -> User:
    user = User.objects.create_user(f"staff-{User.objects.count()}", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(codename__in=codenames))
    return user


def test_view_alone_lists_the_pending_agents_but_cannot_decide(client):
    started = enrolment.start({"hostname": "shop-7", "platform": "Linux-6.1"}, source="192.0.2.9")
    client.force_login(staff("view_enrolment"))
    page = client.get(PAGE)
    assert page.status_code == 200
    text = page.content.decode()
    assert "shop-7" in text and "Linux-6.1" in text and "192.0.2.9" in text
    assert 'name="approve"' not in text
    posted = client.post(
        PAGE, {"code": started.user_code, "tenant": "acme", "name": "n", "approve": "1"}
    )
    assert posted.status_code == 403
    assert Enrolment.objects.get().status == "pending" and not Device.objects.exists()


def test_approve_permission_approves_and_the_token_is_not_on_the_page(client):
    started = enrolment.start({"hostname": "shop-7"}, source="192.0.2.9")
    client.force_login(staff("view_enrolment", "approve_enrolment"))
    form = client.get(PAGE + f"?code={started.user_code}").content.decode()
    assert f'value="{started.user_code}"' in form
    answer = client.post(
        PAGE,
        {"code": started.user_code, "tenant": "acme", "name": "shop", "approve": "1"},
        follow=True,
    )
    assert (
        "Enrolled device acme/shop for the agent on shop-7 (192.0.2.9)" in answer.content.decode()
    )
    Enrolment.objects.update(last_polled_at=None)
    grant = enrolment.poll(started.device_code, source="192.0.2.9")
    assert grant.token not in answer.content.decode()
    missing = client.post(PAGE, {"code": "BBBB-BBBB", "approve": "1"})
    assert "Give a tenant and a name" in missing.content.decode()
