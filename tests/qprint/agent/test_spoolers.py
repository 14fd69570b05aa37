"""The directory spooler writes each document once, atomically; the null spooler forgets."""

import threading

import pytest

from qprint.agent.printers import backend_for, spooler_uri
from qprint.agent.spoolers import (
    LEDGER_NAME,
    AlreadySpooled,
    DirectorySpooler,
    NullSpooler,
    SpoolJob,
)


def _job(job_id="0b8f", data=b"%PDF-1.4 hello"):
    return SpoolJob(job_id=job_id, title="t", content_type="application/pdf", data=data)


def test_directory_spooler_writes_the_document_named_by_job_id(tmp_path):
    spooler = DirectorySpooler(tmp_path)
    ref = spooler.submit(_job())
    assert ref == str(tmp_path / "0b8f.pdf")
    assert (tmp_path / "0b8f.pdf").read_bytes() == b"%PDF-1.4 hello"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["0b8f.pdf", LEDGER_NAME]
    assert spooler.follow(ref, 1).status == "PRINTED"


def test_directory_spooler_refuses_a_second_write_and_keeps_the_first(tmp_path):
    spooler = DirectorySpooler(tmp_path)
    spooler.submit(_job(data=b"first"))
    with pytest.raises(AlreadySpooled):
        spooler.submit(_job(data=b"second"))
    assert (tmp_path / "0b8f.pdf").read_bytes() == b"first"
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    ledger = (tmp_path / LEDGER_NAME).read_text().split("\n")
    assert [line.split()[1] for line in ledger if line] == ["written", "refused_duplicate"]


def test_directory_spooler_writes_once_under_concurrent_submissions(tmp_path):
    spooler = DirectorySpooler(tmp_path)
    barrier = threading.Barrier(8)
    outcomes: list[str] = []

    def submit(i: int) -> None:
        barrier.wait()
        try:
            spooler.submit(_job(data=f"copy {i}".encode()))
            outcomes.append("written")
        except AlreadySpooled:
            outcomes.append("refused")

    threads = [threading.Thread(target=submit, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes) == ["refused"] * 7 + ["written"]
    assert (tmp_path / "0b8f.pdf").read_bytes().startswith(b"copy ")


def test_null_spooler_accepts_everything():
    assert NullSpooler().submit(_job()) == "null:0b8f"


def test_unknown_spooler_is_named():
    with pytest.raises(ValueError, match="unknown spooler 'lpr'"):
        spooler_uri("lpr")


def test_a_spooler_kind_is_a_printer_uri_of_the_one_registry(tmp_path):
    assert spooler_uri("null") == "null:"
    assert spooler_uri("cups", queue="front") == "cups:front"
    assert spooler_uri("cups") == "cups:"
    spooler = backend_for(spooler_uri("directory", directory=str(tmp_path)))
    assert isinstance(spooler, DirectorySpooler)
    assert spooler.directory == tmp_path
    with pytest.raises(ValueError, match="needs --spool-dir"):
        spooler_uri("directory")
