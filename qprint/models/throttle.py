"""Counters of failed authentications, shared by every node (qprint.domain.throttle owns them)."""

from django.db import models
from django.utils.translation import gettext_lazy as _


class AuthFailureCount(models.Model):
    """Failed authentications of one source address or one credential prefix in a window."""

    #: ``addr:<address>`` or ``prefix:<hash of the secret's first characters>``; never a secret.
    scope = models.CharField(_("scope"), max_length=100, primary_key=True)
    window_started_at = models.DateTimeField(_("window started at"))
    failures = models.PositiveIntegerField(_("failures"), default=0)

    class Meta:
        db_table = "qprint_auth_failure"
        verbose_name = _("authentication failure count")
        verbose_name_plural = _("authentication failure counts")

    def __str__(self) -> str:
        return f"{self.scope}: {self.failures}"
