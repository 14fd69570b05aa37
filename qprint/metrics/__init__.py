"""qprint's Prometheus metrics (names prefixed ``qprint_``), on ``prometheus_client``.

Two kinds of figures, kept apart so they do not mix (docs/OPERATIONS.md, "Metrics"):

- **Read from the database** at each scrape by
  :class:`~qprint.metrics.collectors.DatabaseCollector`, the same on every node: live connections
  per node (connection rows whose lease has not expired, database clock), jobs by status, the
  oldest QUEUED job's age and the devices offline that have queued jobs (both the print
  overview's own definitions, :mod:`qprint.domain.overview`), the webhook outbox. Aggregate them
  with ``max`` across the nodes, never ``sum``.
- **This process only**, labelled ``node`` and ``pid``: the instruments of
  :mod:`~qprint.metrics.instruments` (claims and events by answer with their latency, submit ->
  PRINTED latency, wakeups delivered to sockets here and their latency, heartbeat reconciles, jobs
  finished), the webhook sender's attempts and latency, and the figures the realtime layer hands
  over with :func:`~qprint.metrics.collectors.install` (sockets open, the bus's state and outages,
  the wakeup publisher's counters). Counters start at 0 with the process; ``sum(rate(...))``
  across processes.

Every instrumentation point in a transport is one call into :mod:`~qprint.metrics.instruments`
(``@instruments.measure_claim``, ``instruments.wakeup_handled(...)``); the domain imports nothing
of this package (import-linter): jobs finished are counted by a receiver of
``qprint.signals.job_finished``. Neither module imports a transport or qcluster:
:func:`~qprint.metrics.collectors.install` (called by ``QPrintConfig.ready``) hands the collectors
the node id and the realtime figures as callables and connects the receiver.
"""
