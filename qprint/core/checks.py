"""System checks for the ``QPRINT`` settings (ids ``qprint.E0xx`` / ``qprint.W0xx``); each
setting's rule and id is declared with the setting in :mod:`qprint.core.conf`.

- ``qprint.E001``: ``QPRINT`` is not a dict.
- ``qprint.E002``: ``HEARTBEAT_SECONDS`` is not a number of at least 1.
- ``qprint.W001``: ``HEARTBEAT_SECONDS`` is below 5 (every device pings that often: load).
- ``qprint.E003``: a setting that must be a positive integer (or number of seconds) is not.
- ``qprint.E004``: ``JOB_TTL_SECONDS`` is neither a positive integer nor ``None``.
- ``qprint.W002``: ``QPRINT`` has a key qprint does not know (a typo is otherwise silent).
- ``qprint.E005``: ``DOCUMENT_BACKEND`` cannot be imported.
- ``qprint.E006``: ``qcluster`` is not in ``INSTALLED_APPS`` (qprint runs on its nodes: node
  identity, singleton tasks, drain; see docs/CLUSTER.md, "Doors for other apps").
- ``qprint.E009``: an input limit or the authentication throttle (``MAX_JSON_DEPTH``,
  ``MAX_JSON_ITEMS``, ``MAX_PRINTERS``, ``MAX_DETAIL_BYTES``, ``MAX_SETTINGS_BYTES``,
  ``MAX_MESSAGE_LENGTH``, ``MAX_FRAMES_PER_SECOND``, ``AUTH_FAILURE_LIMIT``,
  ``AUTH_FAILURE_WINDOW_SECONDS``) is not a positive integer.
- ``qprint.E010``: ``MAX_JSON_DEPTH`` is above 200 (the JSON parser's own stack would give out
  first: a deep body would be refused by the parser, not by the limit).
- ``qprint.E007``: ``WEBHOOK_ALLOW_HTTP`` is not a bool, or ``WEBHOOK_ALLOWED_HOSTS`` is not a list
  of host names, addresses or networks.
- ``qprint.E008``: ``ACCEPTED_CONTENT_TYPES`` is not a non-empty list of ``type/subtype`` names.
- ``qprint.E020``: ``TRUSTED_PROXIES`` is not a list of addresses or networks (CIDR).
- ``qprint.E021``: ``RENDER_MEMORY_BYTES`` is below 64 MiB, too little for a render worker to load
  PDFium (every preview and fit check would fail; docs/DOCUMENTS.md).
"""

from django.apps import apps
from django.core import checks

from qprint.core.conf import qprint_settings


@checks.register()
def check_qcluster_installed(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    if apps.is_installed("qcluster"):
        return []
    return [
        checks.Error(
            "qprint needs qcluster: add 'qcluster' to INSTALLED_APPS.",
            hint="qprint uses qcluster for the node's identity, its singleton tasks (job expiry "
            "and retention) and the drain of device sockets.",
            id="qprint.E006",
        )
    ]


@checks.register()
def check_qprint_settings(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    """Each declared setting's rule (:mod:`qprint.core.conf`), the dict itself and unknown keys."""
    return qprint_settings.check()
