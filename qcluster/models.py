"""The four cluster tables, with fixed names: ``cluster_node``, ``cluster_lease``,
``cluster_setting`` and ``cluster_alert``.

Only the domain modules write them: ``qcluster.nodes`` (the node registry), ``qcluster.leases``
(the lease statements), ``qcluster.sweeper`` (LOST transitions and retention) and
``qcluster.alerts``. Every time stored here that decides liveness or ownership comes from the
database clock.
"""

from django.core.exceptions import ValidationError
from django.db import models
from django.db.models.functions import Now
from django.utils.translation import gettext_lazy as _

from qcluster import runtime_config
from qcluster.conf import VERSION_MAX_LENGTH


class NodeStatus(models.TextChoices):
    UP = "UP", _("Up")
    DRAINING = "DRAINING", _("Draining")
    LOST = "LOST", _("Lost")
    STOPPED = "STOPPED", _("Stopped")


#: Statuses of a node that is, as far as the cluster knows, still running.
LIVE_STATUSES = (NodeStatus.UP, NodeStatus.DRAINING)

NODE_ID_MAX_LENGTH = 200
LEASE_NAME_MAX_LENGTH = 200


class ClusterNode(models.Model):
    """One node (pod/host) of the cluster, written by its own ``cluster_runtime``."""

    node_id = models.CharField(_("node"), max_length=NODE_ID_MAX_LENGTH, primary_key=True)
    pod_name = models.CharField(_("pod"), max_length=253, blank=True, default="")
    k8s_node_name = models.CharField(_("Kubernetes node"), max_length=253, blank=True, default="")
    zone = models.CharField(_("zone"), max_length=100, blank=True, default="")
    deployment = models.CharField(_("deployment"), max_length=253, blank=True, default="")
    roles = models.CharField(_("roles"), max_length=255, blank=True, default="")
    version = models.CharField(_("version"), max_length=VERSION_MAX_LENGTH, blank=True, default="")
    pid = models.IntegerField(_("pid"), null=True, blank=True)
    started_at = models.DateTimeField(_("started at"), null=True, blank=True)
    heartbeat_at = models.DateTimeField(_("heartbeat at"), null=True, blank=True, db_index=True)
    status = models.CharField(
        _("status"), max_length=10, choices=NodeStatus.choices, default=NodeStatus.UP
    )
    worker_threads = models.IntegerField(_("worker threads"), default=0)
    scheduler_enabled = models.BooleanField(_("scheduler enabled"), default=False)
    running_tasks = models.IntegerField(_("running tasks"), default=0)
    connections = models.IntegerField(_("connections"), default=0)
    memory_rss_bytes = models.BigIntegerField(_("memory (RSS bytes)"), null=True, blank=True)
    drain_requested = models.BooleanField(_("drain requested"), default=False)
    drain_requested_by = models.CharField(
        _("drain requested by"), max_length=150, blank=True, default=""
    )
    drain_requested_at = models.DateTimeField(_("drain requested at"), null=True, blank=True)
    status_changed_at = models.DateTimeField(_("status changed at"), null=True, blank=True)

    class Meta:
        db_table = "cluster_node"
        ordering = ["node_id"]
        verbose_name = _("node")
        verbose_name_plural = _("nodes")
        permissions = [("drain_clusternode", _("Can drain a node and cancel its drain"))]

    def __str__(self) -> str:
        return f"{self.node_id} ({self.status})"

    @property
    def role_list(self) -> list[str]:
        return [r for r in self.roles.split(",") if r]


class ClusterLease(models.Model):
    """A named lease. ``version`` is bumped on every change and is the fencing token."""

    name = models.CharField(_("name"), max_length=LEASE_NAME_MAX_LENGTH, primary_key=True)
    holder_node_id = models.CharField(
        _("holder"), max_length=NODE_ID_MAX_LENGTH, null=True, blank=True
    )
    acquired_at = models.DateTimeField(_("acquired at"), null=True, blank=True)
    renewed_at = models.DateTimeField(_("renewed at"), null=True, blank=True)
    expires_at = models.DateTimeField(_("expires at"), null=True, blank=True)
    version = models.BigIntegerField(_("version"), default=0)
    transitions = models.IntegerField(_("holder changes"), default=0)

    class Meta:
        db_table = "cluster_lease"
        ordering = ["name"]
        verbose_name = _("lease")
        verbose_name_plural = _("leases")

    def __str__(self) -> str:
        return self.name


class ClusterSettingQuerySet(models.QuerySet):
    """Reading the stored runtime settings; their rules live in ``qcluster.runtime_config``."""

    def stored(self) -> dict[str, str]:
        """``{key: value}`` as stored (one query)."""
        return dict(self.values_list("key", "value"))

    def load_config(self) -> runtime_config.RuntimeConfig:
        """The runtime config from the stored values (one query); see ``runtime_config.parse``."""
        return runtime_config.parse(self.stored())


class ClusterSetting(models.Model):
    """A runtime setting every node re-reads each heartbeat; validated on every save."""

    key = models.CharField(_("key"), max_length=100, primary_key=True)
    value = models.TextField(_("value"))
    description = models.TextField(_("description"), blank=True, default="")

    objects = ClusterSettingQuerySet.as_manager()

    class Meta:
        db_table = "cluster_setting"
        ordering = ["key"]
        verbose_name = _("setting")
        verbose_name_plural = _("settings")

    def __str__(self) -> str:
        return f"{self.key}={self.value}"

    def save(self, *args, **kwargs) -> None:
        """Refuse an invalid value here too, so a shell or a script cannot store one."""
        self.clean()
        super().save(*args, **kwargs)

    def clean(self) -> None:
        try:
            stored = ClusterSetting.objects.stored()
            self.value = runtime_config.validate(self.key, self.value, stored)
        except ValueError as exc:
            raise ValidationError({"value": str(exc)}) from exc


class ClusterAlert(models.Model):
    """Something an operator should look at (``cluster.node.lost``, ...)."""

    code = models.CharField(_("code"), max_length=100, db_index=True)
    node_id = models.CharField(_("node"), max_length=NODE_ID_MAX_LENGTH, blank=True, default="")
    message = models.TextField(_("message"))
    raised_at = models.DateTimeField(_("raised at"), db_default=Now())
    acknowledged_at = models.DateTimeField(_("acknowledged at"), null=True, blank=True)
    acknowledged_by = models.CharField(_("acknowledged by"), max_length=150, blank=True, default="")

    class Meta:
        db_table = "cluster_alert"
        ordering = ["-raised_at", "-id"]
        verbose_name = _("alert")
        verbose_name_plural = _("alerts")

    def __str__(self) -> str:
        return f"{self.code} {self.node_id}".strip()
