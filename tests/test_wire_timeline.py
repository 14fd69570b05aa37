"""The wire timeline of docs/PERFORMANCE.md ("The ninth step") reads a loopback capture: a
synthetic capture of one pushed job gives back its spans and PostgreSQL's part of each."""

import struct

from tests.bench import wire_timeline

NODE, CLIENT, AGENT, PG, PG_CLIENT, REDIS, REDIS_CLIENT = (
    8000,
    40001,
    40002,
    5439,
    40003,
    6379,
    40004,
)
JOB = b"0ab71cb8-9ac8-406e-8b54-7bbeb5af1e2a"


def _frame(source: int, destination: int, sequence: int, data: bytes) -> bytes:
    tcp = struct.pack(">HHIIBBHHH", source, destination, sequence, 0, 5 << 4, 0x18, 65535, 0, 0)
    total = 20 + len(tcp) + len(data)
    ip = struct.pack(">BBHHHBBH4s4s", 0x45, 0, total, 0, 0, 64, 6, 0, b"\x7f\0\0\1", b"\x7f\0\0\1")
    return b"\0" * 12 + b"\x08\x00" + ip + tcp + data


def _capture(path, packets) -> None:
    blob = struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1)
    for n, (ms, source, destination, data) in enumerate(packets):
        frame = _frame(source, destination, n, data)
        seconds, micro = divmod(1_000_000 + round(ms * 1000), 1_000_000)
        record = struct.pack("<IIII", seconds, micro, len(frame), len(frame)) + frame
        blob += record + (record if n % 2 else b"")  # the loopback's copies are read once
    path.write_bytes(blob)


def test_a_pushed_jobs_spans_and_its_round_trips(tmp_path):
    capture = tmp_path / "lo.pcap"
    _capture(capture, [
        (-50, AGENT, NODE, b"GET /qprint/api/v1/device/ws HTTP/1.1"),
        (0, CLIENT, NODE, b"POST /qprint/api/v1/jobs HTTP/1.1"),
        (1, PG_CLIENT, PG, b"P select device"),
        (2, PG, PG_CLIENT, b"1 row"),
        (3, REDIS_CLIENT, REDIS, b"*3\r\n$7\r\nPUBLISH\r\n"),
        (4, NODE, CLIENT, b"HTTP/1.1 201 Created\r\n\r\n{\"id\": \"" + JOB + b"\"}"),
        (5, PG_CLIENT, PG, b"Q BEGIN"),
        (5.5, PG, PG_CLIENT, b"C BEGIN"),
        (7, NODE, AGENT, b'\x81~{"job_id": "' + JOB + b'"}'),
        (9, AGENT, NODE, b"\x81\xfe RECEIVED"),
        (10, PG_CLIENT, PG, b"B gate"),
        (13, PG, PG_CLIENT, b"2 row"),
        (14, NODE, AGENT, b'\x81~{"type": "event_recorded"}'),
        (17, AGENT, NODE, b"\x81\xfe SPOOLED"),
        (17.1, AGENT, NODE, b"\x81\xfe PRINTED"),
        (18, PG_CLIENT, PG, b"B gate"),
        (20, PG, PG_CLIENT, b"2 row"),
        (21, NODE, AGENT, b'\x81~{"type": "event_recorded"}'),
        (21.1, NODE, AGENT, b'\x81~{"type": "event_recorded"}'),
    ])  # fmt: skip

    figures = wire_timeline.timeline(wire_timeline.packets(str(capture)), PG, jobs=1)

    spans = {name: (f["span_ms"], f["postgresql_ms"]) for name, f in figures.items()
             if name != "answered"}  # fmt: skip
    assert spans == {
        "published": (3.0, 1.0),
        "assigned": (4.0, 0.5),
        "received_sent": (2.0, 0.0),
        "received_answered": (5.0, 3.0),
        "reports_sent": (3.0, 0.0),
        "reports_answered": (4.1, 2.0),
    }
    assert figures["answered"] == {"span_ms": 4.0, "jobs": 1}
    # The job is a warm-up flood's when the phase's jobs come after it: none is read.
    assert wire_timeline.timeline(wire_timeline.packets(str(capture)), PG, jobs=1, skip=1) == {}


def test_how_soon_each_wakeup_left_after_its_commit(tmp_path):
    """From the commit (the submission connection's last answer before the ``PUBLISH``) to the
    ``PUBLISH``, and whether it went out before the 201; another connection's answer in between
    is not the commit."""
    capture = tmp_path / "lo.pcap"
    other = 40005
    _capture(capture, [
        (0, CLIENT, NODE, b"POST /qprint/api/v1/jobs HTTP/1.1"),
        (1, PG_CLIENT, PG, b"B select device"),
        (2, PG, PG_CLIENT, b"1 row"),
        (2.5, PG_CLIENT, PG, b"B insert"),
        (3, PG, PG_CLIENT, b"2 created_at"),
        (3.2, other, PG, b"B claim"),
        (3.4, PG, other, b"2 row"),
        (3.6, REDIS_CLIENT, REDIS, b"*3\r\n$7\r\nPUBLISH\r\n"),
        (4, NODE, CLIENT, b"HTTP/1.1 201 Created\r\n\r\n{}"),
        (200, CLIENT, NODE, b"POST /qprint/api/v1/jobs HTTP/1.1"),
        (201, PG_CLIENT, PG, b"B insert"),
        (202, PG, PG_CLIENT, b"2 created_at"),
        (203, NODE, CLIENT, b"HTTP/1.1 201 Created\r\n\r\n{}"),
        (204, REDIS_CLIENT, REDIS, b"*3\r\n$7\r\nPUBLISH\r\n"),
    ])  # fmt: skip

    figures = wire_timeline.wakeup(wire_timeline.packets(str(capture)), PG, jobs=2)

    assert figures == {
        "commit_to_publish_p50_ms": 1.3,
        "commit_to_publish_p90_ms": 2.0,  # the benchmarks' percentile: the larger of two
        "published_before_the_201": 1,
        "jobs": 2,
    }
