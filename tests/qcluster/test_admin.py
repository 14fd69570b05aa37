"""The Cluster admin through Django's test client, for users holding different permissions."""

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Permission

from qcluster import leases
from qcluster.models import ClusterAlert, ClusterLease, ClusterNode, ClusterSetting
from tests.qcluster.conftest import make_node

NODES = "/admin/qcluster/clusternode/"
WIDGET = "/admin/qcluster/clusternode/widget/"


def staff(django_user_model, username: str, *codenames: str):
    user = django_user_model.objects.create_user(username, password="pw", is_staff=True)
    user.user_permissions.set(
        Permission.objects.filter(content_type__app_label="qcluster", codename__in=codenames)
    )
    return user


@pytest.fixture
def nodes(db):
    make_node("web-1")
    make_node("web-2", status="DRAINING")
    make_node("worker-1", roles="web,worker")


def run_action(client, action: str, *node_ids: str, confirmed: bool = True):
    """The list action on ``node_ids`` (a drain confirmed on its page, as the operator would)."""
    data = {"action": action, "_selected_action": list(node_ids)}
    if confirmed:
        data["confirmed"] = "yes"
    return client.post(NODES, data, follow=True)


def test_staff_without_permissions_sees_nothing_of_the_cluster(client, django_user_model, nodes):
    client.force_login(staff(django_user_model, "nobody"))

    index = client.get("/admin/")

    assert index.status_code == 200
    assert b"qcluster" not in index.content and b"Cluster nodes by role" not in index.content
    assert client.get(NODES).status_code == 403
    assert client.get(WIDGET).status_code == 403
    assert client.get("/admin/qcluster/").status_code == 404


def test_viewer_sees_nodes_and_widget_but_no_drain_action(client, django_user_model, nodes):
    client.force_login(staff(django_user_model, "viewer", "view_clusternode"))

    page = client.get(NODES)

    assert page.status_code == 200
    assert b"web-1" in page.content and b"worker-1" in page.content
    assert b"drain_nodes" not in page.content
    assert b"Cluster nodes by role" in client.get("/admin/").content
    response = run_action(client, "drain_nodes", "web-1")
    assert ClusterNode.objects.get(node_id="web-1").drain_requested is False
    assert response.status_code == 200


def test_nodes_are_read_only_but_may_be_deleted(admin_client, nodes):
    assert admin_client.get("/admin/qcluster/clusternode/add/").status_code == 403
    change = admin_client.post(
        "/admin/qcluster/clusternode/web-1/change/", {"status": "LOST", "roles": "x"}
    )
    assert change.status_code == 403
    assert ClusterNode.objects.get(node_id="web-1").status == "UP"

    admin_client.post("/admin/qcluster/clusternode/web-1/delete/", {"post": "yes"})

    assert not ClusterNode.objects.filter(node_id="web-1").exists()


def test_drain_action_records_who_asked(client, django_user_model, nodes):
    client.force_login(staff(django_user_model, "oncall", "view_clusternode", "drain_clusternode"))

    page = client.get(NODES)
    response = run_action(client, "drain_nodes", "web-1")

    assert b"drain_nodes" in page.content
    assert b"Drain requested for 1 node." in response.content
    row = ClusterNode.objects.get(node_id="web-1")
    assert (row.drain_requested, row.drain_requested_by) == (True, "oncall")
    assert LogEntry.objects.filter(object_id="web-1", change_message="Drain requested").exists()


def test_drain_asks_first_and_warns_when_it_drains_the_last_up_node(admin_client, nodes):
    # web-1 and worker-1 are UP: draining web-1 leaves worker-1.
    page = run_action(admin_client, "drain_nodes", "web-1", confirmed=False).content.decode()
    assert 'id="qcluster-drain-confirmation"' in page and 'data-node="web-1"' in page
    assert "1 node stays UP: worker-1." in page and "qcluster-drain-last" not in page
    assert ClusterNode.objects.get(node_id="web-1").drain_requested is False  # only asked
    # Both UP nodes at once: nothing would serve.
    page = run_action(admin_client, "drain_nodes", "web-1", "worker-1", confirmed=False)
    assert 'id="qcluster-drain-last"' in page.content.decode()
    assert not ClusterNode.objects.filter(drain_requested=True).exists()
    # Confirmed: drained, and the list shows it before the node's runtime takes it up.
    done = run_action(admin_client, "drain_nodes", "web-1", "worker-1")
    assert b"Drain requested for 2 nodes." in done.content
    listing = admin_client.get(NODES).content.decode()
    assert listing.count('class="drain-requested"') == 2


def test_cancel_drain_action_returns_a_draining_node_to_up(admin_client, nodes):
    run_action(admin_client, "drain_nodes", "web-1")
    ClusterNode.objects.filter(node_id="web-1").update(status="DRAINING")

    response = run_action(admin_client, "cancel_drain", "web-1", "web-2")

    assert b"Drain cancelled for 1 node." in response.content
    assert b"Nothing to do for: web-2" in response.content
    row = ClusterNode.objects.get(node_id="web-1")
    assert (row.status, row.drain_requested) == ("UP", False)


def test_widget_counts_nodes_per_role_and_status(admin_client, nodes, settings):
    settings.QCLUSTER = {"WIDGET_REFRESH_SECONDS": 7}

    data = admin_client.get(WIDGET).json()
    index = admin_client.get("/admin/").content.decode()
    app_page = admin_client.get("/admin/qcluster/").content.decode()

    roles = {r["role"]: r for r in data["roles"]}
    assert roles["web"]["counts"] == {"UP": 2, "DRAINING": 1, "LOST": 0, "STOPPED": 0}
    assert roles["worker"]["counts"]["UP"] == 1 and roles["worker"]["total"] == 1
    assert (data["total"], data["refresh_seconds"]) == (3, 7)
    for page in (index, app_page):
        assert 'id="qcluster-nodes-widget"' in page
        assert 'data-refresh-seconds="7"' in page
        assert "qcluster/nodes_widget.js" in page


def test_a_host_without_its_own_index_template_keeps_its_admin_index(admin_client, nodes, settings):
    # A host that does not opt in (no templates/admin/index.html of its own): qcluster must not
    # change its admin index; the widget is on the Cluster app page only.
    settings.TEMPLATES = [{**settings.TEMPLATES[0], "DIRS": []}]

    index = admin_client.get("/admin/").content.decode()
    app_page = admin_client.get("/admin/qcluster/").content.decode()

    assert "Site administration" in index
    assert 'id="qcluster-nodes-widget"' not in index
    assert 'id="qcluster-nodes-widget"' in app_page


def test_lease_edit_forces_a_hand_over_and_bumps_version(admin_client, db):
    token = leases.as_node("node-a").try_acquire("task:report", 60)

    response = admin_client.post(
        "/admin/qcluster/clusterlease/task:report/change/",
        {"holder_node_id": "node-b", "expires_at_0": "2099-01-01", "expires_at_1": "00:00:00"},
    )

    assert response.status_code == 302, response.content
    row = ClusterLease.objects.get(name="task:report")
    assert (row.holder_node_id, row.version, row.transitions) == ("node-b", token + 1, 2)
    assert leases.as_node("node-a").renew("task:report", 60) == 0


def test_a_lease_given_to_a_holder_without_an_expiry_is_refused_in_the_form(admin_client, db):
    """A holder with no expiry would hold the lease for ever and nobody could take it over."""
    token = leases.as_node("node-a").try_acquire("task:report", 60)

    response = admin_client.post(
        "/admin/qcluster/clusterlease/task:report/change/",
        {"holder_node_id": "node-gone", "expires_at_0": "", "expires_at_1": ""},
    )

    assert response.status_code == 200
    assert "needs an expiry" in response.content.decode()
    row = ClusterLease.objects.get(name="task:report")
    assert (row.holder_node_id, row.version) == ("node-a", token)
    with pytest.raises(ValueError, match="needs an expiry"):
        leases.force_hand_over("task:report", "node-gone", None)
    freed = admin_client.post(
        "/admin/qcluster/clusterlease/task:report/change/",
        {"holder_node_id": "", "expires_at_0": "", "expires_at_1": ""},
    )
    assert freed.status_code == 302  # no holder, no expiry: the lease is free
    assert leases.as_node("node-b").try_acquire("task:report", 60)


def test_lease_list_shows_holder_and_remaining_time(admin_client, db):
    leases.as_node("node-a").try_acquire("task:report", 600)

    page = admin_client.get("/admin/qcluster/clusterlease/").content.decode()

    assert "node-a" in page and "task:report" in page
    assert "min" in page or "s<" in page


def test_invalid_setting_is_refused_in_the_form_with_the_reason(admin_client, db):
    response = admin_client.post(
        "/admin/qcluster/clustersetting/lost_after_seconds/change/",
        {"value": "20", "description": "x"},
    )

    assert response.status_code == 200
    assert "at least twice heartbeat_seconds" in response.content.decode()
    assert ClusterSetting.objects.get(key="lost_after_seconds").value == "60"


def test_valid_setting_is_saved_from_the_form(admin_client, db):
    response = admin_client.post(
        "/admin/qcluster/clustersetting/alert_on_lost/change/",
        {"value": "FALSE", "description": "mail the admins"},
    )

    assert response.status_code == 302
    assert ClusterSetting.objects.get(key="alert_on_lost").value == "false"


def test_acknowledge_action_records_who_and_when(client, django_user_model, db):
    alert = ClusterAlert.objects.create(code="cluster.node.lost", node_id="n", message="lost")
    client.force_login(staff(django_user_model, "ops", "view_clusteralert", "change_clusteralert"))

    response = client.post(
        "/admin/qcluster/clusteralert/",
        {"action": "acknowledge", "_selected_action": [alert.pk]},
        follow=True,
    )

    assert b'value="acknowledge"' in client.get("/admin/qcluster/clusteralert/").content
    assert b"1 alert acknowledged." in response.content
    alert.refresh_from_db()
    assert alert.acknowledged_by == "ops" and alert.acknowledged_at is not None


def test_alert_viewer_cannot_acknowledge(client, django_user_model, db):
    alert = ClusterAlert.objects.create(code="cluster.node.lost", node_id="n", message="lost")
    client.force_login(staff(django_user_model, "reader", "view_clusteralert"))

    page = client.get("/admin/qcluster/clusteralert/")
    client.post(
        "/admin/qcluster/clusteralert/", {"action": "acknowledge", "_selected_action": [alert.pk]}
    )

    assert page.status_code == 200 and b'value="acknowledge"' not in page.content
    alert.refresh_from_db()
    assert alert.acknowledged_at is None
