"""qprint's foundation: what every layer above may import and that imports nothing of them.

No model and nothing of ``qprint.models``, ``qprint.domain`` or a transport: the job state
machine (:mod:`~qprint.core.states`), the refusals with their code and status
(:mod:`~qprint.core.errors`), the input limits (:mod:`~qprint.core.inputs`), the claim gate's pure
decision (:mod:`~qprint.core.gate`), prepared queries (:mod:`~qprint.core.prepared`), the SQL text
that differs by database vendor (:mod:`~qprint.core.sql`), the settings (:mod:`~qprint.core.conf`,
checked by :mod:`~qprint.core.checks`), the database threads (:mod:`~qprint.core.executor`), the
log formatters (:mod:`~qprint.core.logs`) and the doors into qcluster (:mod:`~qprint.core.cluster`).
"""
