"""Where a pushed job's time goes, read off the wire (docs/PERFORMANCE.md, "The ninth step").

Capture the loopback while the end-to-end benchmark's latency phase runs (as root; ``tcpdump``
from Debian's package), then read the capture::

    tcpdump -i lo -s 400 -w lo.pcap &
    BENCH_SIZE=quick BENCH_E2E_VARIANTS=pushed BENCH_LABEL=trace \\
        python -m pytest -s tests/bench/bench_e2e.py
    python -m tests.bench.wire_timeline lo.pcap --pg-port 5439 --skip 100

The ``--jobs`` submissions after the first ``--skip`` are the latency phase's (one every 200 ms,
so a job's packets do not overlap the next one's); the benchmark floods ``BENCH_WARM_UP`` (100)
jobs before it. For each job, the moments its messages crossed the loopback: the
submission's request and answer, the wakeup's ``PUBLISH``, the assignment frame (found by the
job's id), the agent's frames and the node's answers; and, between each pair of those moments,
how long PostgreSQL's round trips took (each query until its answer). The rest of a span is the
Python of the node or of the agent that held the job then. Medians over the jobs, in ms. Last,
how soon each wakeup's ``PUBLISH`` followed its submission's commit (:func:`wakeup`).

No dependency: the capture is read with the standard library (pcap, Ethernet, IPv4, TCP).
"""

from __future__ import annotations

import argparse
import re
import statistics
import struct
from collections.abc import Iterator
from dataclasses import dataclass

from tests.bench.common import percentile


@dataclass(frozen=True)
class Packet:
    at: float
    source: int
    destination: int
    data: bytes


def packets(path: str) -> list[Packet]:
    """The TCP segments with a payload, in capture order (each once: the loopback's copies of a
    segment are dropped)."""
    with open(path, "rb") as f:
        blob = f.read()
    magic = blob[:4]
    endian = "<" if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
    fraction = 1e-9 if magic in (b"\x4d\x3c\xb2\xa1", b"\xa1\xb2\x3c\x4d") else 1e-6
    out: list[Packet] = []
    seen: set[tuple] = set()
    at = 24
    while at + 16 <= len(blob):
        seconds, part, length, _ = struct.unpack(endian + "IIII", blob[at : at + 16])
        frame = blob[at + 16 : at + 16 + length]
        at += 16 + length
        if len(frame) < 34 or frame[12:14] != b"\x08\x00" or frame[23] != 6:  # IPv4, TCP
            continue
        ip = 14 + (frame[14] & 0x0F) * 4
        total = struct.unpack(">H", frame[16:18])[0]
        tcp = ip + (frame[ip + 12] >> 4) * 4
        data = frame[tcp : 14 + total]
        if not data:
            continue
        source, destination, sequence = struct.unpack(">HHI", frame[ip : ip + 8])
        key = (source, destination, sequence, len(data))
        if key in seen:
            continue
        seen.add(key)
        out.append(Packet(seconds + part * fraction, source, destination, data))
    return out


#: The moments of a pushed job, in the order they happen, and what the span up to each is.
MOMENTS = [
    ("published", "the submission: request, its statements, the wakeup published after the commit"),
    ("assigned", "the claim on the socket's node, the assignment frame sent"),
    ("received_sent", "the agent: journal, RECEIVED sent"),
    ("received_answered", "the node records RECEIVED, answers"),
    ("reports_sent", "the agent: spooled, SPOOLED and PRINTED sent"),
    ("reports_answered", "the node records them, answers"),
]


def timeline(
    packets: list[Packet], pg_port: int, jobs: int, skip: int = 0
) -> dict[str, dict[str, float]]:
    """Median span and PostgreSQL's part of it for each of :data:`MOMENTS`, and (``answered``)
    from the request to the submission's 201, which goes out beside the chain."""
    first: dict[tuple[int, int], bytes] = {}
    for p in packets:
        if (p.destination, p.source) not in first:
            first.setdefault((p.source, p.destination), p.data[:40])
    agents = {k for k, data in first.items() if data.startswith(b"GET ")}
    spans: dict[str, list[float]] = {name: [] for name, _ in MOMENTS}
    database: dict[str, list[float]] = {name: [] for name, _ in MOMENTS}
    answered: list[float] = []
    for start, window in _submissions(packets, jobs, skip):
        marks = _marks(window, start, agents)
        if marks is None:
            continue
        answered.append((marks["answered"] - start.at) * 1000)
        previous = start.at
        for name, _ in MOMENTS:
            spans[name].append((marks[name] - previous) * 1000)
            database[name].append(_database_ms(window, pg_port, previous, marks[name]))
            previous = marks[name]
    figures = {
        name: {
            "span_ms": round(statistics.median(spans[name]), 2),
            "postgresql_ms": round(statistics.median(database[name]), 2),
        }
        for name, _ in MOMENTS
        if spans[name]
    }
    if answered:
        figures["answered"] = {
            "span_ms": round(statistics.median(answered), 2),
            "jobs": len(answered),
        }
    return figures


def _submissions(
    packets: list[Packet], jobs: int, skip: int
) -> Iterator[tuple[Packet, list[Packet]]]:
    """Each submission's request of the phase (``jobs`` of them after ``skip``), and the packets
    of the half second from it: the window where that job's moments are looked for."""
    posts = [i for i, p in enumerate(packets) if p.data.startswith(b"POST /qprint/api/v1/jobs")]
    for i in posts[skip : skip + jobs]:
        start = packets[i]
        yield start, [p for p in packets[i : i + 4000] if p.at - start.at < 0.5]


def _marks(window: list[Packet], start: Packet, agents: set) -> dict[str, float] | None:
    marks: dict[str, float] = {}
    client = (start.source, start.destination)
    job_id = None
    agent = None
    for p in window:
        if "published" not in marks and b"PUBLISH" in p.data[:20]:
            marks["published"] = p.at
        elif job_id is None:
            found = re.search(rb'"id":\s*"([0-9a-f-]{36})"', p.data)
            if (p.destination, p.source) == client and b" 201 " in p.data[:20]:
                marks["answered"] = p.at
            if (p.destination, p.source) == client and found:
                job_id = found.group(1)
                marks.setdefault("answered", p.at)
        elif agent is None and (p.destination, p.source) in agents and job_id in p.data:
            marks["assigned"], agent = p.at, (p.destination, p.source)
        elif agent is not None and (p.source, p.destination) == agent:
            marks.setdefault("received_sent" if "received_answered" not in marks else
                             "reports_sent", p.at)  # fmt: skip
        elif agent is not None and (p.destination, p.source) == agent:
            if "reports_sent" in marks:
                marks["reports_answered"] = p.at
            elif "received_sent" in marks:
                marks.setdefault("received_answered", p.at)
    if not all(name in marks for name, _ in [*MOMENTS, ("answered", "")]):
        return None
    return marks


def wakeup(packets: list[Packet], pg_port: int, jobs: int, skip: int = 0) -> dict[str, float]:
    """How soon each submission's wakeup left for Redis: from its commit (the last answer of
    PostgreSQL, before the wakeup's ``PUBLISH``, on the connection of the submission's first
    query) to that ``PUBLISH``, p50 and p90 in ms, and in how many of the jobs it went out before
    the submission's 201 (docs/PERFORMANCE.md, "The thirty-fourth step")."""
    after_commit: list[float] = []
    before_answer = 0
    for start, window in _submissions(packets, jobs, skip):
        client = (start.source, start.destination)
        connection = commit = published = answered = None
        for p in window:
            if connection is None and p.destination == pg_port:
                connection = p.source
            elif published is None and p.source == pg_port and p.destination == connection:
                commit = p.at
            if published is None and b"PUBLISH" in p.data[:20]:
                published = p.at
            if answered is None and (p.destination, p.source) == client and b" 201 " in p.data[:20]:
                answered = p.at
        if commit is None or published is None or answered is None:
            continue
        after_commit.append((published - commit) * 1000)
        before_answer += published < answered
    if not after_commit:
        return {}
    return {
        "commit_to_publish_p50_ms": round(statistics.median(after_commit), 2),
        "commit_to_publish_p90_ms": round(percentile(after_commit, 90), 2),
        "published_before_the_201": before_answer,
        "jobs": len(after_commit),
    }


def _database_ms(window: list[Packet], pg_port: int, since: float, until: float) -> float:
    """The time PostgreSQL's round trips took between two moments: from each query sent to the
    server until the next packet back on that connection."""
    total = 0.0
    waiting: dict[int, float] = {}
    for p in window:
        if not since <= p.at <= until:
            continue
        if p.destination == pg_port:
            waiting.setdefault(p.source, p.at)
        elif p.source == pg_port and p.destination in waiting:
            total += p.at - waiting.pop(p.destination)
    return total * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("capture")
    parser.add_argument("--pg-port", type=int, default=5439)
    parser.add_argument("--jobs", type=int, default=100)
    parser.add_argument("--skip", type=int, default=0, help="submissions before the phase's")
    args = parser.parse_args()
    captured = packets(args.capture)
    figures = timeline(captured, args.pg_port, args.jobs, args.skip)
    total = sum(figures[name]["span_ms"] for name, _ in MOMENTS if name in figures)
    print(f"{'span':<20} {'ms':>7} {'PostgreSQL':>11}  what")
    for name, what in MOMENTS:
        if name in figures:
            f = figures[name]
            print(f"{name:<20} {f['span_ms']:>7} {f['postgresql_ms']:>11}  {what}")
    print(f"{'sum of medians':<20} {round(total, 2):>7}")
    if "answered" in figures:
        a = figures["answered"]
        print(f"submission's 201 after {a['span_ms']} ms (median of {a['jobs']} jobs)")
    woken = wakeup(captured, args.pg_port, args.jobs, args.skip)
    if woken:
        print(
            f"wakeup's PUBLISH after the commit: p50 {woken['commit_to_publish_p50_ms']} ms, "
            f"p90 {woken['commit_to_publish_p90_ms']} ms; before the 201 in "
            f"{woken['published_before_the_201']} of {woken['jobs']} jobs"
        )


if __name__ == "__main__":
    main()
