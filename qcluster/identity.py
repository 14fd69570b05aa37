"""Who this node is, read from the environment once per process.

The web process and the ``cluster_runtime`` sidecar of one pod must agree on the node id, so it
comes from the pod's environment: ``QQQ_NODE_ID``, else ``HOSTNAME``, else the machine's hostname.
"""

import os
import socket
from dataclasses import dataclass
from functools import lru_cache
from importlib import metadata

from qcluster.conf import cluster_settings


@dataclass(frozen=True)
class NodeIdentity:
    node_id: str
    roles: tuple[str, ...]
    pod_name: str
    k8s_node_name: str
    zone: str
    deployment: str
    version: str


def _package_version() -> str:
    try:
        return metadata.version("django-qprint")
    except metadata.PackageNotFoundError:
        return "0+unknown"


def read_identity(node_id: str | None = None) -> NodeIdentity:
    """Read the identity from the environment; ``node_id`` overrides it (``--node-id``)."""
    env = os.environ
    roles = tuple(r.strip() for r in env.get("QQQ_NODE_ROLES", "web").split(",") if r.strip())
    return NodeIdentity(
        node_id=node_id or env.get("QQQ_NODE_ID") or env.get("HOSTNAME") or socket.gethostname(),
        roles=roles or ("web",),
        pod_name=env.get("QQQ_POD_NAME", ""),
        k8s_node_name=env.get("QQQ_K8S_NODE_NAME", ""),
        zone=env.get("QQQ_ZONE", ""),
        deployment=env.get("QQQ_DEPLOYMENT", ""),
        version=cluster_settings.APP_VERSION or env.get("QQQ_APP_VERSION") or _package_version(),
    )


@lru_cache(maxsize=1)
def current() -> NodeIdentity:
    """This process's identity (cached: the environment of a running process does not change)."""
    return read_identity()


def node_id() -> str:
    """This process's node id: the same in a node's web process and in its ``cluster_runtime``.

    Read once per process from ``QQQ_NODE_ID``, else ``HOSTNAME``, else the machine's hostname.
    It is the primary key of the node's row in ``cluster_node`` (``nodes.node_status(node_id)``).
    """
    return current().node_id
