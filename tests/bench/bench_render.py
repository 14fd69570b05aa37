"""Rendering documents (docs/DOCUMENTS.md, "Bounds"; docs/PERFORMANCE.md, "Documents").

In this process, through the same worker pool a node uses (``qprint.documents.render``, the
default settings: 2 workers of 512 MiB), with no cache in between:

- **start**: a new worker, from spawn to its first page (Python, PDFium and Pillow loaded);
- **one page**: page 1 of a 1-page A4 PDF of text and boxes at 600 px wide, ``ROUNDS`` times;
- **fifty pages**: each page of a 50-page PDF of the same pages at 600 px (the document is parsed
  again for every page, as every preview request does), ``ROUNDS_50`` rounds of all 50;
- **mono 576**: the 1-page PDF as a 1-bit dithered PNG 576 dots wide (a CloudPRNT printer);
- **receipt strip**: a 20-page PDF of 80 x 297 mm receipts as the one 1-bit image a CloudPRNT
  printer gets (``render_strip``: the pages one under the other, drawn in one worker request),
  with this process's CPU per image (the node's side: the pipe and nothing else);
- **page sizes**: the fit check's read of the 50-page PDF's page sizes;
- **memory**: the workers' high-water mark of resident memory (``VmHWM``) after all of it, and
  what this process (the node's side) grew by meanwhile.
"""

from __future__ import annotations

import os
import resource
import time
from pathlib import Path

import pytest

from qprint.documents import render
from tests.bench.common import latency_figures
from tests.bench.conftest import size
from tests.bench.machine import process_rss_bytes
from tests.qprint.documents.pdfs import Page, pdf

pytestmark = [pytest.mark.slow]

ROUNDS = size(300, 60)
ROUNDS_50 = size(4, 1)


def text_page() -> Page:
    """An A4 invoice-like page: 45 lines of text, a header bar, a table's rules."""
    lines = [
        (
            20,
            40 + i * 5.5,
            9,
            f"Line {i + 1:02d}  item {1000 + i}  qty {i % 7 + 1}  "
            f"price {(i * 37) % 500 + 20}.00  total {(i * 91) % 2000 + 40}.00",
        )
        for i in range(45)
    ]
    rules = [(20, 42 + i * 5.5, 170, 0.2) for i in range(45)]
    return Page(210, 297, [(20, 15, 170, 12), *rules], texts=lines)  # fmt: skip


def hwm_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def timed(call, rounds: int) -> list[float]:
    spent = []
    for _ in range(rounds):
        started = time.perf_counter()
        call()
        spent.append((time.perf_counter() - started) * 1000)
    return spent


def receipt_page(number: int) -> Page:
    """An 80 x 297 mm receipt: a header bar and 40 lines of text and rules."""
    lines = [(4, 20 + i * 6.5, 8, f"{number:02d}-{i:02d}  item {i}  1 x 2.50") for i in range(40)]
    rules = [(4, 22 + i * 6.5, 72, 0.2) for i in range(40)]
    return Page(80, 297, [(4, 4, 72, 10), *rules], texts=lines)


def own_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def test_render(bench_result):
    one = pdf([text_page()])
    fifty = pdf([text_page() for _ in range(50)])
    render.workers.close()
    node_rss_before = process_rss_bytes(os.getpid())

    started = time.perf_counter()
    render.render_page(one, "application/pdf", width=600)
    start_ms = (time.perf_counter() - started) * 1000

    one_page = timed(lambda: render.render_page(one, "application/pdf", width=600), ROUNDS)
    fifty_pages = []
    for _ in range(ROUNDS_50):
        for page in range(1, 51):
            fifty_pages += timed(
                lambda page=page: render.render_page(
                    fifty, "application/pdf", page=page, width=600
                ),
                1,
            )
    mono = timed(lambda: render.render_page(one, "application/pdf", width=576, mode="mono"), ROUNDS)
    receipts = pdf([receipt_page(n) for n in range(20)])
    strip_rounds = size(30, 5)
    cpu_before = own_cpu_seconds()
    strip = timed(
        lambda: render.render_strip(receipts, "application/pdf", pages=20, width=576),
        strip_rounds,
    )
    strip_node_cpu_ms = (own_cpu_seconds() - cpu_before) * 1000 / strip_rounds
    sizes = timed(lambda: render.page_sizes(fifty, "application/pdf"), size(50, 10))
    png = render.render_page(one, "application/pdf", width=600)

    workers = [w.process.pid for w in render.workers._idle]
    high_water = max(hwm_bytes(pid) for pid in workers)
    node_growth = process_rss_bytes(os.getpid()) - node_rss_before
    render.workers.close()

    bench_result["figures"] = {
        "worker_start_ms": round(start_ms, 1),
        "one_page_600": latency_figures(one_page),
        "fifty_page_600_each_page": latency_figures(fifty_pages),
        "fifty_pages_all_600_ms": round(sum(fifty_pages) / ROUNDS_50, 1),
        "mono_576": latency_figures(mono),
        "receipt_strip_20_pages_576": latency_figures(strip),
        "receipt_strip_node_cpu_ms": round(strip_node_cpu_ms, 2),
        "page_sizes_50": latency_figures(sizes),
        "png_bytes_600": len(png),
        "document_bytes": {"one": len(one), "fifty": len(fifty), "receipts": len(receipts)},
        "worker_rss_high_water_mib": round(high_water / 2**20, 1),
        "workers": len(workers),
        "node_rss_growth_mib": round(node_growth / 2**20, 1),
    }
    print(bench_result["figures"])
