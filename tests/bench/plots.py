"""The plots of docs/PERFORMANCE.md (matplotlib, handed in by tests/bench/report.py), one
function per figure from the benchmarks' JSON records, each saved as a PNG next to them."""

from __future__ import annotations

from tests.bench.records import RESULTS, get, load, machine


def plot_end_to_end(plt) -> str | None:
    now, before = load("end_to_end"), load("end_to_end", "before")
    if not now:
        return None
    variants = [
        ("push_http/latency", "push, HTTP agents"),
        ("push_socket/latency", "push, socket operations"),
        ("pushed/latency", "pushed assignments"),
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
        ("pushed/throughput", "pushed"),
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
    right.set_xticks(list(x), names, rotation=20, ha="right")
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
             ("empty_claim_django", "claim via Django"), ("event", "event"),
             ("event_django", "event via Django"), ("bare", "bare ASGI")]  # fmt: skip
    fig, ax = plt.subplots(figsize=(9, 3.5))
    x = range(len(kinds))
    ax.bar([i - 0.27 for i in x], [get(before, "figures", k, "p50_ms") or 0 for k, _ in kinds],
           0.27, label="p50 before", color="#bbbbbb")  # fmt: skip
    ax.bar(list(x), [get(now, "figures", k, "p50_ms") or 0 for k, _ in kinds], 0.27, label="p50")
    ax.bar([i + 0.27 for i in x], [get(now, "figures", k, "p99_ms") or 0 for k, _ in kinds], 0.27,
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
