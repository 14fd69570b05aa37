"""Read-only summaries of the cluster: the admin's nodes-by-role widget and the metrics."""

from __future__ import annotations

from collections import Counter, defaultdict

from django.db.models import Count

from qcluster.models import ClusterNode, NodeStatus

STATUSES = [s.value for s in NodeStatus]


def nodes_by_role() -> dict:
    """``{"statuses": [...], "roles": [{"role", "counts": {status: n}, "total"}], "total"}``.

    A node with several roles counts under each of them.
    """
    per_role: dict[str, Counter] = defaultdict(Counter)
    total = 0
    for roles, status in ClusterNode.objects.values_list("roles", "status"):
        total += 1
        for role in [r for r in roles.split(",") if r] or ["(none)"]:
            per_role[role][status] += 1
    return {
        "statuses": STATUSES,
        "roles": [
            {
                "role": role,
                "counts": {s: per_role[role].get(s, 0) for s in STATUSES},
                "total": sum(per_role[role].values()),
            }
            for role in sorted(per_role)
        ],
        "total": total,
    }


def nodes_by_status() -> dict[str, int]:
    counts = dict(ClusterNode.objects.order_by().values_list("status").annotate(n=Count("pk")))
    return {s: counts.get(s, 0) for s in STATUSES}
