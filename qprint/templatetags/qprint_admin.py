"""``{% qprint_overview %}``: the print overview (docs/ADMIN.md, "The print overview").

qprint shows it on its own Printing app page (``admin/qprint/app_index.html``) and overrides no
other admin page. A host that wants it on its admin index opts in with a template of its own,
``templates/admin/index.html`` in one of its ``TEMPLATES["DIRS"]``::

    {% extends "admin/index.html" %}
    {% load qprint_admin %}
    {% block content %}
    {% if not app_label %}{% qprint_overview %}{% endif %}{{ block.super }}
    {% endblock %}

Rendered filled in, then refreshed in place from the admin's JSON endpoint every
``QPRINT["OVERVIEW_REFRESH_SECONDS"]``. Renders nothing for a user without
``qprint.view_printjob`` (the endpoint answers them 403), and nothing the second time in one
request. ``{% if not app_label %}`` keeps it off the other apps' pages, whose template extends
the index. Needs
``django.template.context_processors.request``, as the admin does.
"""

from django import template
from django.urls import NoReverseMatch, reverse

from qprint.core.conf import qprint_settings
from qprint.domain import overview

register = template.Library()


@register.inclusion_tag("admin/qprint/overview.html", takes_context=True)
def qprint_overview(context) -> dict:
    request = context.get("request")
    user = getattr(request, "user", None)
    if user is None or not user.has_perm("qprint.view_printjob"):
        return {"visible": False}
    if getattr(request, "_qprint_overview_shown", False):  # once per page
        return {"visible": False}
    request._qprint_overview_shown = True
    try:
        url = reverse("admin:qprint_printjob_overview")
    except NoReverseMatch:  # the job admin is not registered on this site
        return {"visible": False}
    return {
        "visible": True,
        "url": url,
        "refresh_seconds": qprint_settings.OVERVIEW_REFRESH_SECONDS,
        "data": overview.print_overview(),
    }
