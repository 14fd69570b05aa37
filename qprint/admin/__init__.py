"""The Django admin of qprint: devices, jobs, commands, application keys and events.

Every action goes through :mod:`qprint.api`, the same code path as the HTTP API and host code, so
the admin holds no business rule. Columns that carry state (job status, claim, revisions, the
connection record) are read-only here: they change only through the domain's guarded writes.
"Online", the queue depth and the claim gate are the domain's own predicates
(``Device.objects.with_liveness()``, ``with_queue_depth()``, :func:`qprint.core.gate.refusal`).
Secrets (a new device token, a new application key) are shown once, on the response page itself,
and never stored in clear: not in the database, the session or a message cookie.
"""

# Each module registers its ModelAdmins with the admin site when imported.
from qprint.admin import commands, devices, enrolment, jobs, keys, webhooks  # noqa: F401
