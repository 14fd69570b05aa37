"""The Cluster app in the Django admin.

Nodes are read-only (they are written by their runtimes); *Drain node* and *Cancel drain* need
``qcluster.drain_clusternode``. An edit of a lease is a forced hand-over and bumps its version.
Settings are validated by the model. Every action goes through the app's own API
(``qcluster.nodes``, ``qcluster.leases``, ``qcluster.alerts``).
"""

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.db.models import DurationField, ExpressionWrapper, F
from django.db.models.functions import Now
from django.http import HttpRequest, JsonResponse
from django.template.response import TemplateResponse
from django.urls import path
from django.utils.html import format_html
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from qcluster import alerts, leases, nodes, overview
from qcluster.conf import cluster_settings
from qcluster.models import ClusterAlert, ClusterLease, ClusterNode, ClusterSetting, NodeStatus

STATUS_COLOURS = {
    NodeStatus.UP: "#2e7d32",
    NodeStatus.DRAINING: "#ef6c00",
    NodeStatus.LOST: "#c62828",
    NodeStatus.STOPPED: "#616161",
}


def _age(delta) -> str:
    if delta is None:
        return "-"
    seconds = delta.total_seconds()
    if seconds < 0:
        return f"in {-seconds:.0f}s"
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}min"
    return f"{seconds / 3600:.1f}h"


def _who(request: HttpRequest) -> str:
    return request.user.get_username()


@admin.register(ClusterNode)
class ClusterNodeAdmin(admin.ModelAdmin):
    list_display = [
        "node_id",
        "roles",
        "status_badge",
        "heartbeat_age",
        "version",
        "zone",
        "connections",
        "running_tasks",
        "memory",
    ]
    list_filter = ["status", "zone", "deployment", "version"]
    search_fields = ["node_id", "pod_name", "k8s_node_name"]
    actions = ["drain_nodes", "cancel_drain"]

    class Media:
        css = {"all": ("qcluster/admin_lists.css",)}

    def get_queryset(self, request):
        age = ExpressionWrapper(Now() - F("heartbeat_at"), output_field=DurationField())
        return super().get_queryset(request).annotate(heartbeat_age=age)

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_drain_permission(self, request) -> bool:
        return request.user.has_perm("qcluster.drain_clusternode")

    @admin.display(description=_("status"), ordering="status")
    def status_badge(self, node: ClusterNode) -> str:
        """The status; a drain asked and not yet taken up by the node's runtime shows at once."""
        colour = STATUS_COLOURS.get(node.status, "#000")
        badge = format_html('<b style="color:{}">{}</b>', colour, node.status)
        if node.drain_requested and node.status == NodeStatus.UP:
            badge = format_html(
                '{} <b style="color:{}" class="drain-requested">{}</b>',
                badge,
                STATUS_COLOURS[NodeStatus.DRAINING],
                _("drain requested"),
            )
        if node.drain_requested and node.drain_requested_by:
            badge = format_html("{} <i>({})</i>", badge, _("by %s") % node.drain_requested_by)
        return badge

    @admin.display(description=_("last beat"), ordering="-heartbeat_at")
    def heartbeat_age(self, node: ClusterNode) -> str:
        return _age(getattr(node, "heartbeat_age", None))

    @admin.display(description=_("memory"), ordering="memory_rss_bytes")
    def memory(self, node: ClusterNode) -> str:
        if node.memory_rss_bytes is None:
            return "-"
        return f"{node.memory_rss_bytes / (1024 * 1024):.0f} MiB"

    @admin.action(description=_("Drain node"), permissions=["drain"])
    def drain_nodes(self, request, queryset):
        """Asks first (a page naming the nodes, and warning when no UP node would be left),
        then drains on the confirmation's post."""
        asked = [n for n in queryset.values_list("node_id", flat=True)]
        if request.POST.get("confirmed") != "yes":
            return self._confirm_drain(request, queryset, asked)
        done = [n for n in asked if nodes.request_drain(n, by=_who(request))]
        for node_id in done:
            self.log_change(request, queryset.get(node_id=node_id), "Drain requested")
        self._report(
            request, done, asked, "Drain requested for %d node.", "Drain requested for %d nodes."
        )

    @admin.action(description=_("Cancel drain"), permissions=["drain"])
    def cancel_drain(self, request, queryset) -> None:
        asked = [n for n in queryset.values_list("node_id", flat=True)]
        done = [n for n in asked if nodes.cancel_drain(n, by=_who(request))]
        for node_id in done:
            self.log_change(request, queryset.get(node_id=node_id), "Drain cancelled")
        self._report(
            request, done, asked, "Drain cancelled for %d node.", "Drain cancelled for %d nodes."
        )

    def _confirm_drain(self, request, queryset, asked: list[str]) -> TemplateResponse:
        left = nodes.serving_after_drain(asked)
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": _("Drain nodes?"),
            "nodes": list(queryset.order_by("node_id")),
            "serving_after": left,
            "action_checkbox_name": ACTION_CHECKBOX_NAME,
        }
        return TemplateResponse(request, "admin/qcluster/drain_confirmation.html", context)

    def _report(self, request, done, asked, singular, plural) -> None:
        if done:
            self.message_user(request, ngettext(singular, plural, len(done)) % len(done))
        skipped = sorted(set(asked) - set(done))
        if skipped:
            self.message_user(
                request,
                _("Nothing to do for: %s (not running, draining already, or no such request).")
                % ", ".join(skipped),
                messages.WARNING,
            )

    # --- the nodes-by-role widget's data -------------------------------------------------------

    def get_urls(self):
        widget = path(
            "widget/",
            self.admin_site.admin_view(self.widget_view),
            name="qcluster_clusternode_widget",
        )
        return [widget, *super().get_urls()]

    def widget_view(self, request: HttpRequest) -> JsonResponse:
        if not self.has_view_permission(request):
            return JsonResponse(
                {"error": "permission_denied", "message": "You may not view cluster nodes."},
                status=403,
            )
        data = overview.nodes_by_role()
        data["refresh_seconds"] = cluster_settings.WIDGET_REFRESH_SECONDS
        return JsonResponse(data)


class LeaseForm(forms.ModelForm):
    class Meta:
        model = ClusterLease
        fields = ["name", "holder_node_id", "expires_at"]

    def clean(self):
        cleaned = super().clean()
        problem = leases.hand_over_problem(cleaned.get("holder_node_id"), cleaned.get("expires_at"))
        if problem and not self.has_error("expires_at"):  # an expiry that did not parse: said
            self.add_error("expires_at", problem)
        return cleaned


@admin.register(ClusterLease)
class ClusterLeaseAdmin(admin.ModelAdmin):
    form = LeaseForm
    list_display = ["name", "holder_node_id", "remaining", "version", "transitions", "renewed_at"]
    search_fields = ["name", "holder_node_id"]
    readonly_fields = ["acquired_at", "renewed_at", "version", "transitions"]

    def get_queryset(self, request):
        remaining = ExpressionWrapper(F("expires_at") - Now(), output_field=DurationField())
        return super().get_queryset(request).annotate(remaining_time=remaining)

    def get_readonly_fields(self, request, obj=None):
        return [*self.readonly_fields, *(["name"] if obj is not None else [])]

    @admin.display(description=_("remaining"), ordering="expires_at")
    def remaining(self, lease: ClusterLease) -> str:
        left = getattr(lease, "remaining_time", None)
        if lease.holder_node_id is None or left is None:
            return "-"
        if left.total_seconds() <= 0:
            return _("expired")
        return _age(left).removeprefix("in ")

    def save_model(self, request, obj: ClusterLease, form, change: bool) -> None:
        """A forced hand-over: holder and expiry as entered, ``version`` bumped."""
        leases.force_hand_over(obj.name, obj.holder_node_id or None, obj.expires_at)
        obj.refresh_from_db()


@admin.register(ClusterSetting)
class ClusterSettingAdmin(admin.ModelAdmin):
    list_display = ["key", "value", "description"]

    def get_readonly_fields(self, request, obj=None):
        return ["key"] if obj is not None else []


@admin.register(ClusterAlert)
class ClusterAlertAdmin(admin.ModelAdmin):
    list_display = ["raised_at", "code", "node_id", "message", "acknowledged_at", "acknowledged_by"]
    list_filter = ["code", ("acknowledged_at", admin.EmptyFieldListFilter)]
    search_fields = ["node_id", "message"]
    actions = ["acknowledge"]
    readonly_fields = [
        "code",
        "node_id",
        "message",
        "raised_at",
        "acknowledged_at",
        "acknowledged_by",
    ]

    def has_add_permission(self, request) -> bool:
        return False

    @admin.action(description=_("Acknowledge"), permissions=["change"])
    def acknowledge(self, request, queryset) -> None:
        count = alerts.acknowledge(list(queryset.values_list("pk", flat=True)), by=_who(request))
        self.message_user(
            request, ngettext("%d alert acknowledged.", "%d alerts acknowledged.", count) % count
        )
