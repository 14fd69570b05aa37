"""Plots and the targets table of docs/PERFORMANCE.md, from the JSON in docs/bench/.

    python -m tests.bench.report          # after ./dev bench (which runs it)

``<name>.json`` is the latest run of each benchmark; ``<name>.before.json``, when present, the
same benchmark on the code before the performance work (``BENCH_LABEL=before``), shown next to
it. The section between the ``bench:begin``/``bench:end`` markers of docs/PERFORMANCE.md is
rewritten; everything else in that file is left alone.
"""

from __future__ import annotations

import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "docs" / "bench"
DOC = REPO / "docs" / "PERFORMANCE.md"
BEGIN, END = "<!-- bench:begin -->", "<!-- bench:end -->"


def load(name: str, label: str = "") -> dict | None:
    path = RESULTS / (f"{name}.{label}.json" if label else f"{name}.json")
    return json.loads(path.read_text()) if path.exists() else None


def get(record: dict | None, *keys):
    value = record
    for key in keys:
        if not isinstance(value, dict) or key not in value:
            return None
        value = value[key]
    return value


def fmt(value, unit: str = "") -> str:
    if value is None:
        return "not measured"
    if isinstance(value, float):
        value = f"{value:.1f}" if abs(value) >= 10 else f"{value:.2f}"
    return f"{value}{unit}"


# (what, target text, benchmark, keys, comparison, bound, unit)
TARGETS = [
    ("trivial request p50", "≤ 4 ms", "per_request",
     ("figures", "trivial", "p50_ms"), "<=", 4, " ms"),
    ("empty claim p50", "≤ 5 ms", "per_request",
     ("figures", "empty_claim", "p50_ms"), "<=", 5, " ms"),
    ("HTTP agents: submit → PRINTED p50", "≤ 30 ms", "end_to_end",
     ("figures", "push_http/latency", "p50_ms"), "<=", 30, " ms"),
    ("HTTP agents: submit → PRINTED p99", "≤ 100 ms", "end_to_end",
     ("figures", "push_http/latency", "p99_ms"), "<=", 100, " ms"),
    ("HTTP agents: throughput", "≥ 60 jobs/s", "end_to_end",
     ("figures", "push_http/throughput", "jobs_per_s"), ">=", 60, " jobs/s"),
    ("push vs 1 s polling at p50", "≥ 25x", "end_to_end",
     ("ratios", "poll_1s_p50_over_push_http_p50"), ">=", 25, "x"),
    ("socket-operation agents: p50", "≤ 15 ms", "end_to_end",
     ("figures", "push_socket/latency", "p50_ms"), "<=", 15, " ms"),
    ("socket-operation agents: throughput", "≥ 120 jobs/s", "end_to_end",
     ("figures", "push_socket/throughput", "jobs_per_s"), ">=", 120, " jobs/s"),
    ("cross-node wake p99 / Channels floor p99", "≤ 2x", "wake_latency_and_ping_throughput",
     ("figures", "wake_p99_over_floor_p99"), "<=", 2, "x"),
    ("statements per idle ping", "1", "idle_devices", ("figures", "statements_per_ping"),
     "<=", 1.05, ""),
    ("RSS per idle connection", "≤ 50 KiB", "idle_devices",
     ("figures", "rss_per_connection_kib"), "<=", 50, " KiB"),
    ("CPU of the node with the idle devices", "< 25 % of a core", "idle_devices",
     ("figures", "node_cpu_percent_of_core"), "<", 25, " %"),
]  # fmt: skip


def verdict(value, comparison: str, bound) -> str:
    if value is None:
        return "—"
    ok = {"<=": value <= bound, ">=": value >= bound, "<": value < bound}[comparison]
    if ok:
        return "met"
    if comparison in ("<=", "<"):
        return f"missed: {value / bound:.1f}x the bound"
    return f"missed: {100 * value / bound:.0f} % of the bound"


def machine(record: dict | None) -> str:
    if not record:
        return ""
    m = record["machine"]
    return (
        f"load {m['load_average_1m']['mean']} (max {m['load_average_1m']['max']}), "
        f"others {m['other_processes_cores']['mean']} cores"
    )


def table() -> str:
    rows = [
        "| target | bound | before | measured | verdict | size, machine during the run |",
        "|---|---|---|---|---|---|",
    ]
    for what, bound_text, name, keys, comparison, bound, unit in TARGETS:
        now, before = load(name), load(name, "before")
        value = get(now, *keys)
        rows.append(
            f"| {what} | {bound_text} | {fmt(get(before, *keys), unit)} | {fmt(value, unit)} | "
            f"{verdict(value, comparison, bound)} | {now['size'] if now else ''}, {machine(now)} |"
        )
    return "\n".join(rows)


# (what, benchmark, keys, unit): figures without a target, shown for what they say.
FIGURES = [
    ("push, HTTP agents: submit → PRINTED p50 / p99 at 5 jobs/s", "end_to_end",
     [("figures", "push_http/latency", "p50_ms"), ("figures", "push_http/latency", "p99_ms")],
     " ms"),
    ("push, socket operations: p50 / p99 at 5 jobs/s", "end_to_end",
     [("figures", "push_socket/latency", "p50_ms"), ("figures", "push_socket/latency", "p99_ms")],
     " ms"),
    ("polling 1 s / 5 s: p50", "end_to_end",
     [("figures", "poll_1s/latency", "p50_ms"), ("figures", "poll_5s/latency", "p50_ms")], " ms"),
    ("PostgreSQL floor: p50 / p99, jobs/s", "end_to_end",
     [("figures", "floor/latency", "p50_ms"), ("figures", "floor/latency", "p99_ms"),
      ("figures", "floor/throughput", "jobs_per_s")], ""),
    ("push, HTTP agents: p50 over the floor's p50", "end_to_end",
     [("ratios", "push_http_p50_over_floor_p50")], "x"),
    ("polling 5 s p50 over push p50", "end_to_end", [("ratios", "poll_5s_p50_over_push_http_p50")],
     "x"),
    ("trivial request / empty claim / event p50 over the bare ASGI app's p50", "per_request",
     [("figures", "trivial", "x_bare_p50"), ("figures", "empty_claim", "x_bare_p50"),
      ("figures", "event", "x_bare_p50")], "x"),
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
    ("documents: render worker memory high-water mark, node's growth (MiB)", "render",
     [("figures", "worker_rss_high_water_mib"), ("figures", "node_rss_growth_mib")], ""),
]  # fmt: skip


def figures_table() -> str:
    rows = ["| figure | before | now | size, machine |", "|---|---|---|---|"]
    for what, name, keys, unit in FIGURES:
        name, _, label = name.partition("@")  # name@label: that run of the benchmark
        now, before = load(name, label), None if label else load(name, "before")

        def values(record, keys=keys, unit=unit):
            got = [get(record, *k) for k in keys]
            if all(v is None for v in got):
                return "not measured"
            return " / ".join(fmt(v) for v in got) + unit

        rows.append(
            f"| {what} | {values(before) if before else '—'} | {values(now)} | "
            f"{now['size'] if now else ''}, {machine(now)} |"
        )
    return "\n".join(rows)


def plot_end_to_end(plt) -> str | None:
    now, before = load("end_to_end"), load("end_to_end", "before")
    if not now:
        return None
    variants = [
        ("push_http/latency", "push, HTTP agents"),
        ("push_socket/latency", "push, socket operations"),
        ("poll_1s/latency", "polling 1 s"),
        ("poll_5s/latency", "polling 5 s"),
        ("floor/latency", "PostgreSQL floor"),
    ]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    labels, p50, p99, p50b = [], [], [], []
    for key, label in variants:
        f = get(now, "figures", key)
        if not f:
            continue
        labels.append(label)
        p50.append(f["p50_ms"])
        p99.append(f["p99_ms"])
        p50b.append(get(before, "figures", key, "p50_ms") or 0)
    x = range(len(labels))
    left.bar([i - 0.27 for i in x], p50b, 0.27, label="p50 before", color="#bbbbbb")
    left.bar(list(x), p50, 0.27, label="p50", color="#1f77b4")
    left.bar([i + 0.27 for i in x], p99, 0.27, label="p99", color="#ff7f0e")
    left.set_yscale("log")
    left.set_xticks(list(x), labels, rotation=20, ha="right")
    left.set_ylabel("submit → PRINTED (ms, log)")
    left.legend()
    names, after, earlier = [], [], []
    for key, label in [
        ("push_http/throughput", "HTTP agents"),
        ("push_socket/throughput", "socket operations"),
        ("floor/throughput", "PostgreSQL floor"),
    ]:
        value = get(now, "figures", key, "jobs_per_s")
        if value is None:
            continue
        names.append(label)
        after.append(value)
        earlier.append(get(before, "figures", key, "jobs_per_s") or 0)
    x = range(len(names))
    right.bar([i - 0.2 for i in x], earlier, 0.4, label="before", color="#bbbbbb")
    right.bar([i + 0.2 for i in x], after, 0.4, label="now", color="#2ca02c")
    right.set_xticks(list(x), names)
    right.set_ylabel("jobs/s")
    right.set_yscale("log")
    right.legend()
    fig.suptitle(f"End to end ({now['size']} size; {machine(now)})", fontsize=9)
    fig.tight_layout()
    return save(fig, plt, "end_to_end.png")


def plot_per_request(plt) -> str | None:
    now, before = load("per_request"), load("per_request", "before")
    if not now:
        return None
    kinds = [("trivial", "GET /qcluster/ready/"), ("empty_claim", "empty claim"),
             ("event", "event"), ("bare", "bare ASGI")]  # fmt: skip
    fig, ax = plt.subplots(figsize=(7, 3.5))
    x = range(len(kinds))
    ax.bar([i - 0.27 for i in x], [get(before, "figures", k, "p50_ms") or 0 for k, _ in kinds],
           0.27, label="p50 before", color="#bbbbbb")  # fmt: skip
    ax.bar(list(x), [now["figures"][k]["p50_ms"] for k, _ in kinds], 0.27, label="p50")
    ax.bar([i + 0.27 for i in x], [now["figures"][k]["p99_ms"] for k, _ in kinds], 0.27,
           label="p99")  # fmt: skip
    ax.set_xticks(list(x), [label for _, label in kinds])
    ax.set_ylabel("ms")
    ax.legend()
    ax.set_title(f"Per request, one keep-alive client ({machine(now)})", fontsize=9)
    fig.tight_layout()
    return save(fig, plt, "per_request.png")


def plot_idle(plt) -> str | None:
    now = load("idle_devices")
    if not now:
        return None
    points = now["figures"]["rss_mib"]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot([n for n, _ in points], [m for _, m in points], marker="o")
    ax.set_xlabel("open device sockets on the node")
    ax.set_ylabel("RSS of the node (MiB)")
    ax.set_title(
        f"{now['figures']['rss_per_connection_kib']} KiB per connection ({machine(now)})",
        fontsize=9,
    )
    fig.tight_layout()
    return save(fig, plt, "idle_devices.png")


def plot_wake(plt) -> str | None:
    now = load("wake_latency_and_ping_throughput")
    if not now:
        return None
    fig, ax = plt.subplots(figsize=(6, 3.5))
    rows = [("qprint wake", now["figures"]["wake"]), ("Channels floor", now["figures"]["floor"])]
    outage = load("wake_with_redis_stopped")
    if outage:
        rows.append(("Redis stopped", outage["figures"]["wake_redis_stopped"]))
    x = range(len(rows))
    ax.bar([i - 0.2 for i in x], [r["p50_ms"] for _, r in rows], 0.4, label="p50")
    ax.bar([i + 0.2 for i in x], [r["p99_ms"] for _, r in rows], 0.4, label="p99")
    ax.set_xticks(list(x), [label for label, _ in rows])
    ax.set_yscale("log")
    ax.set_ylabel("ms (log)")
    ax.legend()
    ax.set_title(f"Cross-node wake ({machine(now)})", fontsize=9)
    fig.tight_layout()
    return save(fig, plt, "wake.png")


def save(fig, plt, name: str) -> str:
    fig.savefig(RESULTS / name, dpi=90)
    plt.close(fig)
    return name


def main() -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    images = [p(plt) for p in (plot_end_to_end, plot_per_request, plot_wake, plot_idle)]
    section = [BEGIN, "", "### Targets", "", table(), "", "### Other figures of the same runs", ""]
    section += [figures_table(), ""]
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
