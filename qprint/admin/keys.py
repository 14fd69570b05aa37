"""The admin of application keys: a new key's secret is shown once, on the response page."""

from __future__ import annotations

from django import forms
from django.contrib import admin
from django.core.exceptions import ValidationError
from django.http import HttpResponse
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext_lazy

from qprint import api
from qprint.admin.common import (
    SecretColumnsMixin,
    apply_to_each,
    show_secrets_once,
)
from qprint.models import ApplicationKey


class ApplicationKeyForm(forms.ModelForm):
    """A new key's form: a tenant has one live key of a name (the model's constraint, checked
    here so that the form says so rather than the request failing)."""

    def clean(self):
        cleaned = super().clean()
        tenant, name = cleaned.get("tenant"), cleaned.get("name")
        if self.instance.pk is None and tenant and name:
            try:
                ApplicationKey(tenant=tenant, name=name, revoked=False).validate_constraints()
            except ValidationError:
                raise ValidationError(
                    _("A live key %(key)s exists: revoke it first, or choose another name."),
                    params={"key": f"{tenant}/{name}"},
                    code="key_exists",
                ) from None
        return cleaned


@admin.register(ApplicationKey)
class ApplicationKeyAdmin(SecretColumnsMixin, admin.ModelAdmin):
    form = ApplicationKeyForm
    secret_columns = ("key_hash",)
    list_display = ("name", "tenant", "created_at", "last_used_at", "revoked")
    list_filter = ("tenant", "revoked")
    search_fields = ("name", "tenant")
    actions = ("revoke_keys",)
    # The hash is never shown: it would only help an attacker to test guesses offline.
    exclude = ("key_hash",)

    def get_fields(self, request, obj=None):
        if obj is None:
            return ("tenant", "name")
        return ("tenant", "name", "created_at", "last_used_at", "revoked")

    def get_readonly_fields(self, request, obj=None):
        return () if obj is None else ("tenant", "name", "created_at", "last_used_at", "revoked")

    def save_model(self, request, obj: ApplicationKey, form, change: bool) -> None:
        if change:
            return  # nothing of a key is edited by hand; revoke it with the action
        key, secret = api.create_application_key(obj.tenant, obj.name)
        obj.pk = key.pk
        obj.key_hash = key.key_hash
        request._qprint_new_secret = secret

    def response_add(self, request, obj, post_url_continue=None) -> HttpResponse:
        secret = getattr(request, "_qprint_new_secret", None)
        if secret is None:
            return super().response_add(request, obj, post_url_continue)
        return show_secrets_once(
            self, request, [(obj, secret)], title=_("Application key"), secret_label=_("key")
        )

    @admin.action(description=_("Revoke selected keys"), permissions=["change"])
    def revoke_keys(self, request, queryset):
        apply_to_each(
            self,
            request,
            queryset.filter(revoked=False),
            lambda key: api.revoke_application_key(key.tenant, key.name),
            str,
            ngettext_lazy("Revoked %(count)d key.", "Revoked %(count)d keys.", "count"),
        )
