"""The admin's "Enrol a device" page (imported by ``qprint.admin``; docs/ADMIN.md).

An operator types the code an agent shows and picks a tenant and a name for a new device, or an
existing device to re-enrol (its token rotates: the old agent is cut off). The page lists the
pending enrolments with what each agent said of itself and the address it came from, so the
operator can tell theirs from someone else's. The decision is the domain's
(:mod:`qprint.domain.enrolment`: the code's throttle, single use); the token goes to the agent
alone and never appears here. Permissions: ``qprint.view_enrolment`` to see the page and the
pending enrolments, ``qprint.approve_enrolment`` to approve or refuse a code.
"""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import DurationField, ExpressionWrapper, F
from django.db.models.functions import Now
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.utils.translation import gettext_lazy as _

from qprint.admin.common import SecretColumnsMixin, actor
from qprint.core.errors import QPrintError
from qprint.domain import enrolment
from qprint.models import Device, DeviceKind, Enrolment

APPROVE_PERMISSION = "qprint.approve_enrolment"


class EnrolForm(forms.Form):
    code = forms.CharField(
        label=_("Code"),
        max_length=20,
        help_text=_("The code the agent shows, e.g. WDJB-MJHT."),
        widget=forms.TextInput(attrs={"autocomplete": "off", "autofocus": True}),
    )
    tenant = forms.CharField(label=_("Tenant"), max_length=100, required=False)
    name = forms.CharField(label=_("Device name"), max_length=150, required=False)
    description = forms.CharField(label=_("Description"), required=False)
    device = forms.ModelChoiceField(
        label=_("Or re-enrol an existing device"),
        queryset=Device.objects.filter(kind=DeviceKind.AGENT),
        required=False,
        help_text=_("Its token is replaced: the agent that has it now is disconnected."),
    )

    def clean(self):
        data = super().clean()
        new_device = "deny" not in self.data and not data.get("device")
        named = (data.get("tenant") or "").strip() and (data.get("name") or "").strip()
        if new_device and not named:
            raise forms.ValidationError(
                _("Give a tenant and a name for a new device, or pick an existing device.")
            )
        return data


@admin.register(Enrolment)
class EnrolmentAdmin(SecretColumnsMixin, admin.ModelAdmin):
    """The changelist is the "Enrol a device" page; enrolments are never added or edited here
    (an enrolment's own page is read-only, without the code hashes)."""

    secret_columns = ("device_code_hash", "user_code_hash")

    fields = (
        "status",
        "agent_info",
        "source_address",
        "created_at",
        "expires_at",
        "decided_at",
        "decided_by",
        "device",
        "token_issued_at",
    )
    readonly_fields = fields

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False

    def may_decide(self, request: HttpRequest) -> bool:
        return request.user.has_perm(APPROVE_PERMISSION)

    def changelist_view(self, request: HttpRequest, extra_context=None) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        if request.method == "POST" and not self.may_decide(request):
            raise PermissionDenied
        if request.method == "POST":
            form = EnrolForm(request.POST)
            if form.is_valid() and self._decide(request, form):
                return redirect(request.path)
        else:
            form = EnrolForm(initial={"code": request.GET.get("code", "")})
        pending = enrolment.pending().annotate(
            remaining=ExpressionWrapper(F("expires_at") - Now(), output_field=DurationField())
        )
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": _("Enrol a device"),
            "form": form if self.may_decide(request) else None,
            "pending": [
                {
                    "hostname": e.agent_info.get("hostname", ""),
                    "platform": e.agent_info.get("platform", ""),
                    "version": e.agent_info.get("version", ""),
                    "source": e.source_address,
                    "created_at": e.created_at,
                    "minutes_left": max(0, int(e.remaining.total_seconds() // 60)),
                }
                for e in pending
            ],
            **(extra_context or {}),
        }
        response = TemplateResponse(request, "admin/qprint/enrolment/enrol.html", context)
        response["Cache-Control"] = "no-store"
        return response

    def _decide(self, request: HttpRequest, form: EnrolForm) -> bool:
        data = form.cleaned_data
        source = request.META.get("REMOTE_ADDR") or "unknown"
        who = actor(request)
        try:
            if "deny" in request.POST:
                enrolment.deny(data["code"], source=source, actor=who)
                messages.success(request, _("Refused the enrolment; its agent is told so."))
                return True
            decided = enrolment.approve(
                data["code"],
                source=source,
                actor=who,
                tenant=data["tenant"].strip(),
                name=data["name"].strip(),
                device=data["device"],
                description=data["description"],
            )
        except QPrintError as err:
            messages.error(request, err.message)
            return False
        host = decided.agent_info.get("hostname") or "?"
        verb = _("Re-enrolled") if data["device"] else _("Enrolled")
        messages.success(
            request,
            _(
                "%(verb)s device %(device)s for the agent on %(host)s (%(source)s). The agent "
                "receives its token itself and connects."
            )
            % {
                "verb": verb,
                "device": decided.device,
                "host": host,
                "source": decided.source_address,
            },
        )
        return True
