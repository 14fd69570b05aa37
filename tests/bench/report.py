"""Plots and the targets table of docs/PERFORMANCE.md, from the JSON in docs/bench/.

    python -m tests.bench.report          # after ./dev bench (which runs it)

``<name>.json`` is the latest run of each benchmark; ``<name>.before.json``, when present, the
same benchmark on the code before the performance work (``BENCH_LABEL=before``), shown next to
it. The section between the ``bench:begin``/``bench:end`` markers of docs/PERFORMANCE.md is
rewritten; everything else in that file is left alone.
"""

from __future__ import annotations

from tests.bench.plots import plot_end_to_end, plot_idle, plot_per_request, plot_wake
from tests.bench.records import REPO, get, load, machine

DOC = REPO / "docs" / "PERFORMANCE.md"
BEGIN, END = "<!-- bench:begin -->", "<!-- bench:end -->"


def fmt(value, unit: str = "") -> str:
    if value is None:
        return "not measured"
    if isinstance(value, float):
        value = f"{value:.1f}" if abs(value) >= 10 else f"{value:.2f}"
    return f"{value}{unit}"


def cpu(label: str, *kinds: str):
    """The CPU per job of ``kinds`` (summed) in the flood of ``label``."""

    def value(record):
        got = [get(record, "figures", f"{label}/throughput", "cpu_ms_per_job", k) for k in kinds]
        return None if any(v is None for v in got) else round(sum(got), 2)

    return value


def ratio(numerator: tuple, denominator: tuple):
    def value(record):
        n, d = get(record, *numerator), get(record, *denominator)
        return None if n is None or not d else round(n / d, 1)

    return value


def largest(*values):
    def value(record):
        got = [v(record) for v in values]
        return None if any(g is None for g in got) else max(got)

    return value


def instructions(side: str, unit: float = 1e6, digits: int = 3):
    """The instructions per job of ``side`` in ``instructions_per_job``, in ``unit``s (millions)."""

    def value(record):
        got = get(record, "figures", side, "instructions_per_job")
        return None if got is None else round(got / unit, digits)

    return value


# (what, target text, benchmark, keys or a function of the record, comparison, bound, unit)
TARGETS = [
    ("pushed assignments: submit → PRINTED p50 at 5 jobs/s", "≤ 10 ms", "end_to_end",
     ("figures", "pushed/latency", "p50_ms"), "<=", 10, " ms"),
    ("pushed assignments: p99 at 5 jobs/s", "≤ 40 ms", "end_to_end",
     ("figures", "pushed/latency", "p99_ms"), "<=", 40, " ms"),
    ("pushed assignments: flood", "≥ 150 jobs/s", "end_to_end",
     ("figures", "pushed/throughput", "jobs_per_s"), ">=", 150, " jobs/s"),
    ("pushed assignments: nodes + PostgreSQL CPU per job", "≤ 10 ms", "end_to_end",
     cpu("pushed", "nodes", "postgresql"), "<=", 10, " ms"),
    ("HTTP agents: flood", "≥ 80 jobs/s", "end_to_end",
     ("figures", "push_http/throughput", "jobs_per_s"), ">=", 80, " jobs/s"),
    ("HTTP agents: nodes + PostgreSQL CPU per job", "≤ 20 ms", "end_to_end",
     cpu("push_http", "nodes", "postgresql"), "<=", 20, " ms"),
    ("HTTP agents: p50 at 5 jobs/s", "≤ 25 ms", "end_to_end",
     ("figures", "push_http/latency", "p50_ms"), "<=", 25, " ms"),
    ("polling 1 s p50 / pushed p50", "≥ 60x", "end_to_end",
     ratio(("figures", "poll_1s/latency", "p50_ms"), ("figures", "pushed/latency", "p50_ms")),
     ">=", 60, "x"),
    ("PostgreSQL CPU per job, every path (the largest)", "≤ 2.5 ms", "end_to_end",
     largest(cpu("push_http", "postgresql"), cpu("push_socket", "postgresql"),
             cpu("pushed", "postgresql")), "<=", 2.5, " ms"),
    ("idle: node CPU per ping", "≤ 0.6 ms", "idle_devices",
     ("figures", "node_cpu_ms_per_ping"), "<=", 0.6, " ms"),
    ("idle: connects per second", "≥ 500/s", "idle_devices",
     ("figures", "connects_per_s"), ">=", 500, "/s"),
    ("idle: RSS per connection", "≤ 40 KiB", "idle_devices",
     ("figures", "rss_per_connection_kib"), "<=", 40, " KiB"),
    ("bus_down while Redis is up, connect burst of the storm's devices", "0", "reconnect_storm",
     ("figures", "first_burst", "bus_down_on_a"), "<=", 0, ""),
    ("bus_down while Redis is up, devices of a killed node moving", "0", "reconnect_storm",
     ("figures", "move", "bus_down_on_b_c"), "<=", 0, ""),
    ("trivial request p50", "≤ 4 ms", "per_request",
     ("figures", "trivial", "p50_ms"), "<=", 4, " ms"),
    ("empty claim p50", "≤ 5 ms", "per_request",
     ("figures", "empty_claim", "p50_ms"), "<=", 5, " ms"),
    ("cross-node wake p99 / Channels floor p99", "≤ 2x", "wake_latency_and_ping_throughput",
     ("figures", "wake_p99_over_floor_p99"), "<=", 2, "x"),
]  # fmt: skip


def value_of(record, keys):
    return keys(record) if callable(keys) else get(record, *keys)


def verdict(value, comparison: str, bound) -> str:
    if value is None:
        return "—"
    ok = {"<=": value <= bound, ">=": value >= bound, "<": value < bound}[comparison]
    if ok:
        return "met"
    if comparison in ("<=", "<"):
        if not bound:
            return f"missed: {value:g} where the bound is {bound:g}"
        ratio = value / bound  # two decimals near the bound, where one would read "1.0x"
        return (
            f"missed: {ratio:.2f}x the bound" if ratio < 1.1 else f"missed: {ratio:.1f}x the bound"
        )
    return f"missed: {100 * value / bound:.0f} % of the bound"


def table() -> str:
    rows = [
        "| target | bound | before | measured | verdict | size, machine during the run |",
        "|---|---|---|---|---|---|",
    ]
    for what, bound_text, name, keys, comparison, bound, unit in TARGETS:
        now, before = load(name), load(name, "before")
        value = value_of(now, keys)
        rows.append(
            f"| {what} | {bound_text} | {fmt(value_of(before, keys), unit)} | {fmt(value, unit)} | "
            f"{verdict(value, comparison, bound)} | {now['size'] if now else ''}, {machine(now)} |"
        )
    return "\n".join(rows)


# (what, benchmark, keys or functions of the record, unit): figures without a target, shown for
# what they say.
FIGURES = [
    ("push, HTTP agents: submit → PRINTED p50 / p99 at 5 jobs/s", "end_to_end",
     [("figures", "push_http/latency", "p50_ms"), ("figures", "push_http/latency", "p99_ms")],
     " ms"),
    ("push, socket operations: p50 / p99 at 5 jobs/s", "end_to_end",
     [("figures", "push_socket/latency", "p50_ms"), ("figures", "push_socket/latency", "p99_ms")],
     " ms"),
    ("pushed assignments: p50 / p99 at 5 jobs/s", "end_to_end",
     [("figures", "pushed/latency", "p50_ms"), ("figures", "pushed/latency", "p99_ms")], " ms"),
    ("polling 1 s / 5 s: p50", "end_to_end",
     [("figures", "poll_1s/latency", "p50_ms"), ("figures", "poll_5s/latency", "p50_ms")], " ms"),
    ("PostgreSQL floor: p50 / p99, jobs/s", "end_to_end",
     [("figures", "floor/latency", "p50_ms"), ("figures", "floor/latency", "p99_ms"),
      ("figures", "floor/throughput", "jobs_per_s")], ""),
    ("push, HTTP agents: p50 over the floor's p50", "end_to_end",
     [("ratios", "push_http_p50_over_floor_p50")], "x"),
    ("pushed assignments: p50 over the floor's p50 (the machine's PostgreSQL, measured in the "
     "same run)", "end_to_end",
     [ratio(("figures", "pushed/latency", "p50_ms"), ("figures", "floor/latency", "p50_ms"))],
     "x"),
    ("polling 5 s p50 over push p50", "end_to_end", [("ratios", "poll_5s_p50_over_push_http_p50")],
     "x"),
    ("trivial request / empty claim / event p50 over the bare ASGI app's p50", "per_request",
     [("figures", "trivial", "x_bare_p50"), ("figures", "empty_claim", "x_bare_p50"),
      ("figures", "event", "x_bare_p50")], "x"),
    ("empty claim / event p50 served directly, and through Django's request cycle", "per_request",
     [("figures", "empty_claim", "p50_ms"), ("figures", "event", "p50_ms"),
      ("figures", "empty_claim_django", "p50_ms"), ("figures", "event_django", "p50_ms")], " ms"),
    ("node CPU per round (trivial + empty claim + event): direct / through Django", "per_request",
     [("figures", "node_cpu_ms_per_round", "direct"),
      ("figures", "node_cpu_ms_per_round", "through_django")], " ms"),
    ("bare ASGI app p50 / p99", "per_request",
     [("figures", "bare", "p50_ms"), ("figures", "bare", "p99_ms")], " ms"),
    ("cross-node wake p50 / p99", "wake_latency_and_ping_throughput",
     [("figures", "wake", "p50_ms"), ("figures", "wake", "p99_ms")], " ms"),
    ("bare Channels group_send p50 / p99", "wake_latency_and_ping_throughput",
     [("figures", "floor", "p50_ms"), ("figures", "floor", "p99_ms")], " ms"),
    ("pings served, all at once (3 rounds)", "wake_latency_and_ping_throughput",
     [("figures", "pings_per_s")], "/s"),
    ("Redis stopped: commit → wake p50 / max (heartbeat 2 s)", "wake_with_redis_stopped",
     [("figures", "wake_redis_stopped", "p50_ms"), ("figures", "wake_redis_stopped", "max_ms")],
     " ms"),
    ("idle devices: connects per second", "idle_devices", [("figures", "connects_per_s")], "/s"),
    ("claims at once: claims/s, p50, p99 (ms)", "claims_at_once",
     [("figures", "claims_per_s"), ("figures", "p50_ms"), ("figures", "p99_ms")], ""),
    ("CPU per job in the flood, HTTP agents: nodes / agents / PostgreSQL / all (ms)",
     "end_to_end",
     [("figures", "push_http/throughput", "cpu_ms_per_job", k)
      for k in ("nodes", "agents", "postgresql", "total")], ""),
    ("CPU per job in the flood, socket operations: nodes / agents / PostgreSQL / all (ms)",
     "end_to_end",
     [("figures", "push_socket/throughput", "cpu_ms_per_job", k)
      for k in ("nodes", "agents", "postgresql", "total")], ""),
    ("CPU per job in the flood, pushed assignments: nodes / agents / PostgreSQL / Redis / "
     "submitters / all (ms)", "end_to_end",
     [("figures", "pushed/throughput", "cpu_ms_per_job", k)
      for k in ("nodes", "agents", "postgresql", "redis", "submitters", "total")], ""),
    ("PostgreSQL CPU per job in the flood (ms), HTTP agents then pushed: its sessions, its own "
     "processes (autovacuum, WAL writer, checkpointer...), the statements' execution and planning "
     "time (pg_stat_statements)", "end_to_end",
     [("figures", f"{v}/throughput", *keys)
      for v in ("push_http", "pushed")
      for keys in (("postgresql_cpu_ms_per_job_by_part", "backends"),
                   ("postgresql_cpu_ms_per_job_by_part", "background"),
                   ("statements", -1, "ms_per_job"),
                   ("statements", -1, "plan_ms_per_job"))], ""),
    ("flood jobs/s: HTTP agents / socket operations / pushed assignments", "end_to_end",
     [("figures", f"{v}/throughput", "jobs_per_s") for v in ("push_http", "push_socket", "pushed")],
     ""),
    ("statements per job (pg_stat_statements): HTTP agents / socket operations / pushed",
     "end_to_end",
     [("figures", f"{v}/throughput", "statements", -1, "calls_per_job")
      for v in ("push_http", "push_socket", "pushed")], ""),
    ("WAL per job, bytes (pg_stat_statements): HTTP agents / socket operations / pushed",
     "end_to_end",
     [("figures", f"{v}/throughput", "statements", -1, "wal_bytes_per_job")
      for v in ("push_http", "push_socket", "pushed")], ""),
    ("PostgreSQL's planning per job (ms) in the flood: HTTP agents / socket operations / pushed; "
     "in the pushed flood's warm-up (what the phase's ANALYZE made every connection plan again)",
     "end_to_end",
     [("figures", f"{v}/throughput", "statements", -1, "plan_ms_per_job")
      for v in ("push_http", "push_socket", "pushed")]
     + [("figures", "pushed/throughput", "warm_up", "statements", -1, "plan_ms_per_job")], ""),
    ("sessions opened on PostgreSQL during the flood (the benchmark's own reads open 3), "
     "automatic ANALYZEs: HTTP agents / socket operations / pushed", "end_to_end",
     [("figures", f"{v}/throughput", "postgresql", key)
      for v in ("push_http", "push_socket", "pushed")
      for key in ("sessions_opened", "autoanalyzes")], ""),
    ("PostgreSQL's WAL fsyncs at 5 jobs/s, HTTP agents then pushed: fsyncs per job, their "
     "time per job and mean (ms; pg_stat_wal)", "end_to_end",
     [("figures", f"{v}/latency", "postgresql", key)
      for v in ("push_http", "pushed")
      for key in ("wal_syncs_per_job", "wal_sync_ms_per_job", "wal_sync_mean_ms")], ""),
    ("idle: node CPU per ping (ms), % of a core, statements per ping", "idle_devices",
     [("figures", "node_cpu_ms_per_ping"), ("figures", "node_cpu_percent_of_core"),
      ("figures", "statements_per_ping")], ""),
    ("idle: while connecting, node CPU per connect (ms), % of a core; the devices' CPU per "
     "connect (ms); statements per connect", "idle_devices",
     [("figures", "node_cpu_ms_per_connect"), ("figures", "node_cpu_percent_of_core_connecting"),
      ("figures", "devices_cpu_ms_per_connect"), ("figures", "statements_per_connect")], ""),
    ("idle: a fifth of the devices reconnecting, ten times: node CPU per reconnect (ms), RSS "
     "growth (MiB); the node's full collections while connecting / pinging / reconnecting",
     "idle_devices",
     [("figures", "node_cpu_ms_per_reconnect"), ("figures", "churn_rss_growth_mib")]
     + [("figures", f"full_collections_{phase}", "full_collections")
        for phase in ("connecting", "pinging", "churn")], ""),
    ("reconnect storm: devices, until all ready on B and C (s), reconnects/s, failed handshakes",
     "reconnect_storm",
     [("figures", "devices"), ("figures", "move", "seconds_until_all_ready"),
      ("figures", "move", "reconnects_per_s"), ("figures", "move", "failed_handshakes")], ""),
    ("reconnect storm: statements and node CPU (ms) per reconnect; first burst connects/s",
     "reconnect_storm",
     [("figures", "move", "statements_per_reconnect"),
      ("figures", "move", "node_cpu_ms_per_reconnect"),
      ("figures", "first_burst", "connects_per_s")], ""),
    ("submit_job in process: CPU per submission (ms), over a bare INSERT, wall p50 / p99 (ms)",
     "submit_job_in_process",
     [("figures", "cpu_ms_per_submission"), ("figures", "cpu_over_floor"),
      ("figures", "wall", "p50_ms"), ("figures", "wall", "p99_ms")], ""),
    ("a device's history: claim p50 (ms), buffers of the claim's read and of a connect's, with "
     "no finished job / 5,000 / 50,000", "device_history",
     [("figures", h, *keys) for h in ("0", "5000", "50000")
      for keys in (("claim", "p50_ms"), ("read_buffers",), ("connect_read_buffers",))], ""),
    ("the disk under PostgreSQL, after the end-to-end run: fsync of 8 KiB p50 / p99 / p99.9 / "
     "max (ms)", "end_to_end",
     [("disk_fsync", k) for k in ("p50_ms", "p99_ms", "p999_ms", "max_ms")], ""),
    ("a database call, node CPU (µs): the hand-off alone, with the node's wrapping, with "
     "SELECT 1 (pooled); SELECT 1 on a thread, connection kept; on the loop's thread",
     "database_call_handoff",
     [("figures", w, "cpu_us_per_call") for w in ("hop", "threads", "statement", "kept", "inline")],
     ""),
    ("a database call on the loop, node CPU (µs): SELECT 1 awaited on psycopg's async "
     "connection, kept; through psycopg_pool's async pool; the agent's journal read (its hand-off)",
     "database_call_handoff",
     [("figures", w, "cpu_us_per_call") for w in ("async", "async_pool", "journal")], ""),
    ("a client message to its handler, node CPU (µs): Channels' await_many_dispatch; the "
     "socket's mailbox", "database_call_handoff",
     [("figures", w, "cpu_us_per_call") for w in ("dispatch_channels", "dispatch")], ""),
    ("the agent alone, a pushed job in process (tests/bench/agent_job.py): CPU per job (µs), "
     "wall p50 / p99 (µs)", "database_call_handoff",
     [("figures", "agent_job", k) for k in ("cpu_us_per_call", "wall_p50_us", "wall_p99_us")],
     ""),
    ("a pushed job in one process, instructions per job (millions, callgrind): the node's side "
     "(tests/bench/node_job.py) / the agent's (tests/bench/agent_job.py)", "instructions_per_job",
     [instructions("node"), instructions("agent")], ""),
    ("a pushed job, a node as deployed (tests/bench/daphne_job.py: qprint-daphne, the HTTP "
     "submission, Daphne and Redis counted): instructions per job (millions, callgrind)",
     "instructions_per_job", [instructions("node_as_deployed")], ""),
    ("a pushed job in one process, CPU per job (µs): the node's side / the agent's",
     "instructions_per_job",
     [("figures", side, "cpu_us_per_job") for side in ("node", "agent")], ""),
    ("a wakeup from node to node through Redis (tests/bench/wakeup_job.py), both nodes' "
     "instructions (thousands, callgrind): hiredis parsing / redis-py's own parser; CPU (µs), "
     "the same two", "instructions_per_job",
     [instructions("wakeup", 1e3, 1), instructions("wakeup_python_parser", 1e3, 1),
      ("figures", "wakeup", "cpu_us_per_job"),
      ("figures", "wakeup_python_parser", "cpu_us_per_job")], ""),
    ("200 devices, 5,000 jobs: HTTP agents jobs/s, p50 / p99 of the flood (ms)",
     "end_to_end@devices200",
     [("figures", "push_http/throughput", k) for k in ("jobs_per_s", "p50_ms", "p99_ms")], ""),
    ("200 devices, 5,000 jobs: socket operations jobs/s, p50 / p99 of the flood (ms)",
     "end_to_end@devices200",
     [("figures", "push_socket/throughput", k) for k in ("jobs_per_s", "p50_ms", "p99_ms")], ""),
    ("claims at once: most sessions waiting on a lock, share of samples with any",
     "claims_at_once",
     [("figures", "lock_waiters_most"), ("figures", "lock_wait_sample_share")], ""),
    ("CloudPRNT, 200 printers every 5 s: polls/s, p50 / p99 (ms), node CPU per poll (ms), "
     "statements per poll", "cloudprnt_polls",
     [("figures", "steady_polls_per_s"), ("figures", "steady_latency", "p50_ms"),
      ("figures", "steady_latency", "p99_ms"), ("figures", "node_cpu_ms_per_poll"),
      ("figures", "statements_per_poll")], ""),
    ("CloudPRNT, 200 printers at once: polls/s served, node CPU per poll (ms), "
     "all answered p50 (ms)",
     "cloudprnt_polls",
     [("figures", "burst_polls_per_s"), ("figures", "burst_node_cpu_ms_per_poll"),
      ("figures", "burst_all_answered_ms", "p50_ms")], ""),
    ("documents: one page of a 1-page PDF at 600 px, p50 / p99 (ms)", "render",
     [("figures", "one_page_600", "p50_ms"), ("figures", "one_page_600", "p99_ms")], ""),
    ("documents: one page of a 50-page PDF at 600 px, p50 / p99; all 50 pages (ms)", "render",
     [("figures", "fifty_page_600_each_page", "p50_ms"),
      ("figures", "fifty_page_600_each_page", "p99_ms"), ("figures", "fifty_pages_all_600_ms")],
     ""),
    ("documents: 1-bit at 576 dots p50 (ms), page sizes of 50 pages p50 (ms), worker start (ms)",
     "render",
     [("figures", "mono_576", "p50_ms"), ("figures", "page_sizes_50", "p50_ms"),
      ("figures", "worker_start_ms")], ""),
    ("documents: a CloudPRNT printer's image of 20 receipt pages at 576 dots, p50 / p99 (ms), "
     "the node's CPU per image (ms)", "render",
     [("figures", "receipt_strip_20_pages_576", "p50_ms"),
      ("figures", "receipt_strip_20_pages_576", "p99_ms"),
      ("figures", "receipt_strip_node_cpu_ms")], ""),
    ("documents: render worker memory high-water mark, node's growth (MiB)", "render",
     [("figures", "worker_rss_high_water_mib"), ("figures", "node_rss_growth_mib")], ""),
]  # fmt: skip


def figures_table() -> str:
    rows = ["| figure | before | now | size, machine |", "|---|---|---|---|"]
    for what, name, keys, unit in FIGURES:
        name, _, label = name.partition("@")  # name@label: that run of the benchmark
        now, before = load(name, label), None if label else load(name, "before")

        def values(record, keys=keys, unit=unit):
            got = [value_of(record, k) for k in keys]
            if all(v is None for v in got):
                return "not measured"
            return " / ".join(fmt(v) for v in got) + unit

        rows.append(
            f"| {what} | {values(before) if before else '—'} | {values(now)} | "
            f"{now['size'] if now else ''}, {machine(now)} |"
        )
    return "\n".join(rows)


def statements_table(top: int = 8) -> str:
    """The statements of a job's path (the flood, ``pg_stat_statements`` on the benchmark's own
    PostgreSQL): calls, total and mean time of execution per statement per job, and how often
    it was planned and for how long per job."""
    now = load("end_to_end")
    rows = []
    for label, title in (("pushed", "pushed assignments"), ("push_http", "HTTP agents")):
        listed = get(now, "figures", f"{label}/throughput", "statements")
        if not listed:
            continue
        rows += [f"**{title}** (flood):", "",
                 "| statement | calls per job | ms per job | mean ms | rows per call "
                 "| plans / planning ms per job | WAL records / bytes per job |",
                 "|---|---|---|---|---|---|---|"]  # fmt: skip
        for item in [*listed[:top], listed[-1]]:
            text = item["statement"].replace("|", "\\|")
            if len(text) > 90:  # cut between words: no half identifier reads as a name
                text = text[:87].rsplit(" ", 1)[0] + " ..."
            rows.append(
                f"| `{text}` | {item['calls_per_job']} | {item['ms_per_job']} | "
                f"{item['mean_ms']} | {fmt(item['rows_per_call'])} | "
                f"{fmt(item.get('plans_per_job'))} / {fmt(item.get('plan_ms_per_job'))} | "
                f"{fmt(item.get('wal_records_per_job'))} / {fmt(item.get('wal_bytes_per_job'))} |"
            )
        rows.append("")
    return "\n".join(rows) if rows else "not measured"


def deployment_table() -> str:
    """The socket-operation flood with the nodes as this benchmark ran them before and as
    deployed, alternating, each counted both ways (``BENCH_E2E_ONLY=deployment``)."""
    record = load("end_to_end", "deployment")
    if not record:
        return "not measured"
    rows = ["| run | nodes as | jobs/s | nodes ms/job (meter) | PostgreSQL ms/job (meter) | "
            "nodes ms/job (whole machine) | PostgreSQL ms/job (whole machine) |",
            "|---|---|---|---|---|---|---|"]  # fmt: skip
    for key, f in record["figures"].items():
        label = key.split("/")[0]
        kind = "deployed" if label.startswith("as_deployed") else "bench settings before"
        m, w = f["cpu_ms_per_job"], f.get("cpu_ms_per_job_whole_machine", {})
        rows.append(
            f"| {label} | {kind} | {f['jobs_per_s']} | {m.get('nodes')} | {m.get('postgresql')}"
            f" | {w.get('nodes')} | {w.get('postgresql')} |"
        )
    rows.append("")
    rows.append(f"Machine during the run: {machine(record)}.")
    return "\n".join(rows)


def main() -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    images = [p(plt) for p in (plot_end_to_end, plot_per_request, plot_wake, plot_idle)]
    section = [BEGIN, "", "### Targets", "", table(), "", "### Other figures of the same runs", ""]
    section += [figures_table(), ""]
    section += ["### Statements per job", "", statements_table(), ""]
    section += ["### The nodes as the benchmark ran them before, and as deployed", ""]
    section += [deployment_table(), ""]
    section += [f"![{name}](bench/{name})" for name in images if name]
    section += ["", END]
    text = DOC.read_text()
    if BEGIN in text and END in text:
        head, _, rest = text.partition(BEGIN)
        _, _, tail = rest.partition(END)
        text = head + "\n".join(section) + tail
    else:
        text += "\n" + "\n".join(section) + "\n"
    DOC.write_text(text)
    print(table())


if __name__ == "__main__":
    main()
