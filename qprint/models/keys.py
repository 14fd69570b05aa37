"""Application keys: how host applications authenticate to the HTTP API, one tenant per key."""

from django.db import models
from django.db.models import Q
from django.db.models.functions import Now
from django.utils.translation import gettext_lazy as _


class ApplicationKey(models.Model):
    tenant = models.CharField(_("tenant"), max_length=100, db_index=True)
    name = models.CharField(_("name"), max_length=150)
    key_hash = models.CharField(
        _("key hash"),
        max_length=64,
        unique=True,
        help_text=_("SHA-256 of the key; the key itself is never stored."),
    )
    created_at = models.DateTimeField(_("created at"), db_default=Now(), editable=False)
    last_used_at = models.DateTimeField(_("last used at"), null=True, blank=True)
    revoked = models.BooleanField(_("revoked"), default=False)

    class Meta:
        db_table = "qprint_application_key"
        verbose_name = _("application key")
        verbose_name_plural = _("application keys")
        ordering = ["tenant", "name"]
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "name"],
                condition=Q(revoked=False),
                name="qprint_appkey_active_name_uniq",
            )
        ]

    def __str__(self) -> str:
        return f"{self.tenant}/{self.name}"
