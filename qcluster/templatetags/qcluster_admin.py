"""``{% qcluster_nodes_widget %}``: the nodes-by-role table.

qcluster shows it on its own Cluster app page (``admin/qcluster/app_index.html``) and overrides no
other admin page. A host that wants it on its admin index opts in with a template of its own,
``templates/admin/index.html`` in one of its ``TEMPLATES["DIRS"]`` (docs/CLUSTER.md)::

    {% extends "admin/index.html" %}
    {% load qcluster_admin %}
    {% block content %}
    {% if not app_label %}{% qcluster_nodes_widget %}{% endif %}{{ block.super }}
    {% endblock %}

The template needs ``django.template.context_processors.request`` (the admin requires it too).
"""

from django import template
from django.urls import NoReverseMatch, reverse

from qcluster import overview
from qcluster.conf import cluster_settings

register = template.Library()


@register.inclusion_tag("admin/qcluster/nodes_widget.html", takes_context=True)
def qcluster_nodes_widget(context) -> dict:
    """Rendered filled in (no flash of an empty table), then refreshed by a few lines of JS.

    Renders nothing for a user who may not view nodes, and nothing the second time in one
    request (a host's index template that adds it is also the parent of the app pages).
    """
    request = context.get("request")
    user = getattr(request, "user", None)
    if user is None or not user.has_perm("qcluster.view_clusternode"):
        return {"visible": False}
    if getattr(request, "_qcluster_nodes_widget_shown", False):
        return {"visible": False}
    request._qcluster_nodes_widget_shown = True
    try:
        url = reverse("admin:qcluster_clusternode_widget")
    except NoReverseMatch:  # the node admin is not registered on this site
        return {"visible": False}
    return {
        "visible": True,
        "url": url,
        "refresh_seconds": cluster_settings.WIDGET_REFRESH_SECONDS,
        "data": overview.nodes_by_role(),
    }
