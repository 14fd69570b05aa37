"""The fit check: a PDF's page sizes against the media lists real printers report (recorded from
CUPS and ippeveprinter by tests/qprint/documents/record_media.py into its media/ folder)."""

import json
from pathlib import Path

import pytest

from qprint.documents import media, render
from qprint.documents.media import MediaMismatch, check_fit, media_of, parse_medium
from tests.qprint.documents import pdfs
from tests.qprint.documents.pdfs import Page

RECORDED = Path(__file__).resolve().parent / "media"


@pytest.fixture(autouse=True, scope="module")
def stop_workers():
    yield
    render.workers.close()


def reported(name: str) -> list[str]:
    return json.loads((RECORDED / f"{name}.json").read_text())["media"]


def printer(list_name: str, printer_name: str | None = None):
    return (printer_name or list_name, {"media": reported(list_name)})


A4 = pdfs.pdf([Page(210, 297)])
A4_LANDSCAPE = pdfs.pdf([Page(297, 210)])
LETTER = pdfs.pdf([Page(215.9, 279.4)])
LABEL = pdfs.pdf([Page(101.6, 152.4)])
LABEL_LANDSCAPE = pdfs.pdf([Page(152.4, 101.6)])
RECEIPT = pdfs.pdf([Page(80, 200)])
LONG_RECEIPT = pdfs.pdf([Page(80, 1200)])
SHORT_RECEIPT = pdfs.pdf([Page(80, 20)])
SHORT_RECEIPT_LANDSCAPE = pdfs.pdf([Page(15, 80)])
A6 = pdfs.pdf([Page(105, 148)])


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("iso_a4_210x297mm", ("iso", "a4", 210, 297, "mm")),
        ("na_letter_8.5x11in", ("na", "letter", 215.9, 279.4, "in")),
        ("oe_4x6-label_4x6in", ("oe", "4x6-label", 101.6, 152.4, "in")),
        ("custom_max_35277.78x35277.78mm", ("custom", "max", 35277.78, 35277.78, "mm")),
        ("roll_max_80x3276.7mm", ("roll", "max", 80, 3276.7, "mm")),
        ("custom_148.52x209.9mm_148.52x209.9mm", ("custom", "148.52x209.9mm", 148.52, 209.9, "mm")),
    ],
)
def test_self_describing_names_give_their_size(name, expected):
    media_class, size_name, width, height, unit = parse_medium(name)
    assert (media_class, size_name, unit) == (expected[0], expected[1], expected[4])
    assert width == pytest.approx(expected[2]) and height == pytest.approx(expected[3])


@pytest.mark.parametrize("name", ["auto", "Letter", "A4", "iso_a4", "4x6in", ""])
def test_names_without_a_size_are_left_out(name):
    assert parse_medium(name) is None
    assert media_of([name, 7, None]) == []


@pytest.mark.parametrize(
    ("document", "list_name", "fits"),
    [
        (A4, "ippeveprinter", True),
        (A4_LANDSCAPE, "ippeveprinter", True),  # either orientation
        (LETTER, "ippeveprinter", True),
        (LABEL, "ippeveprinter", False),
        (RECEIPT, "ippeveprinter", False),
        (A4, "cups-everywhere", True),
        (LABEL, "cups-everywhere", False),
        # cups-pdf reports a custom size range (0.5 in to 35 m): every page fits it
        (LABEL, "cups-pdf", True),
        (RECEIPT, "cups-pdf", True),
        (A6, "cups-pdf", True),
        (LABEL, "ippeveprinter-label", True),
        (LABEL_LANDSCAPE, "ippeveprinter-label", True),
        (A4, "ippeveprinter-label", False),
        (RECEIPT, "ippeveprinter-receipt", True),
        (LONG_RECEIPT, "ippeveprinter-receipt", True),  # on the 80 mm roll
        (SHORT_RECEIPT, "ippeveprinter-receipt", True),  # shorter than roll_min's length: any
        (SHORT_RECEIPT_LANDSCAPE, "ippeveprinter-receipt", True),
        (A4, "ippeveprinter-receipt", False),
        (LABEL, "ippeveprinter-receipt", False),
    ],
)
def test_documents_against_recorded_printer_media(document, list_name, fits):
    if fits:
        note = check_fit(printer(list_name), document, "application/pdf", {})
        assert note.detail["fit"] == "fits" and note.message == ""
        assert note.detail["media"] in reported(list_name)
    else:
        with pytest.raises(MediaMismatch) as refused:
            check_fit(printer(list_name), document, "application/pdf", {})
        assert (refused.value.status, refused.value.code) == (422, "media_mismatch")


def test_two_millimetres_either_way_still_fit_three_do_not():
    label = printer("ippeveprinter-label", "zebra")
    for width, height in ((103.5, 150.5), (99.7, 154.3), (150.5, 103.5)):
        page = pdfs.pdf([Page(width, height)])
        assert check_fit(label, page, "application/pdf", {}).detail["fit"] == "fits"
    for width, height in ((104.8, 152.4), (101.6, 155.6)):
        with pytest.raises(MediaMismatch):
            check_fit(label, pdfs.pdf([Page(width, height)]), "application/pdf", {})


def test_the_message_names_the_page_and_the_printers_media():
    with pytest.raises(MediaMismatch) as refused:
        check_fit(("zebra", {"media": ["oe_4x6-label_4x6in"]}), A4, "application/pdf", {})
    assert refused.value.message.startswith(
        "The document is 210 × 297 mm (A4); printer `zebra` has 4 × 6 in labels."
    )
    assert 'options.fit to "scale"' in refused.value.message

    with pytest.raises(MediaMismatch) as refused:
        check_fit(printer("ippeveprinter", "office"), LABEL, "application/pdf", {})
    assert refused.value.message.startswith(
        "The document is 101.6 × 152.4 mm (4 × 6 in); printer `office` has A4 (210 × 297 mm), "
        "DL envelope (110 × 220 mm), Legal (8.5 × 14 in), Letter (8.5 × 11 in) and 1 more."
    )

    with pytest.raises(MediaMismatch) as refused:
        check_fit(printer("ippeveprinter-receipt", "till"), A4_LANDSCAPE, "application/pdf", {})
    assert "297 × 210 mm (A4 landscape)" in refused.value.message
    assert "80 × 200 mm and 80 mm rolls up to 3276.7 mm long" in refused.value.message


def test_a_document_fits_when_one_of_its_page_sizes_does():
    mixed = pdfs.pdf([Page(101.6, 152.4), Page(210, 297)])
    note = check_fit(printer("ippeveprinter-label"), mixed, "application/pdf", {})
    assert note.detail["fit"] == "fits" and note.detail["media"].endswith("_4x6in")
    two_sizes = pdfs.pdf([Page(210, 297), Page(148, 210)])
    with pytest.raises(MediaMismatch) as refused:
        check_fit(printer("ippeveprinter-label", "zebra"), two_sizes, "application/pdf", {})
    assert "pages are 210 × 297 mm (A4), 148 × 210 mm (A5)" in refused.value.message


def test_fit_scale_accepts_a_mismatch_and_says_so():
    note = check_fit(
        ("zebra", {"media": ["oe_4x6-label_4x6in"]}), A4, "application/pdf", {"fit": "scale"}
    )
    assert note.detail["fit"] == "scale"
    assert note.message == (
        "The document is 210 × 297 mm (A4); printer `zebra` has 4 × 6 in labels: "
        "the printer is asked to scale it (fit: scale)."
    )


@pytest.mark.parametrize(
    "reported_printer",
    [None, ("zebra", {}), ("zebra", {"media": []}), ("zebra", {"media": ["auto", "Letter"]})],
    ids=["no-printer", "no-capabilities", "empty-media", "no-known-size"],
)
def test_a_printer_that_reported_no_media_passes_unchecked_and_says_so(reported_printer):
    note = check_fit(reported_printer, A4, "application/pdf", {})
    assert note.detail == {"fit": "unchecked", "reason": "no_media"}
    assert "was not checked" in note.message


def test_a_document_whose_pages_cannot_be_read_passes_unchecked():
    for document, code in ((pdfs.encrypted(), "encrypted_document"), (b"%PDF-1.4\n", None)):
        note = check_fit(printer("ippeveprinter-label"), document, "application/pdf", {})
        assert note.detail["fit"] == "unchecked"
        assert code is None or note.detail["reason"] == code


@pytest.mark.parametrize("content_type", ["image/png", "application/vnd.zebra-zpl", "text/plain"])
def test_only_pdfs_are_checked(content_type):
    note = check_fit(printer("ippeveprinter-label"), b"anything", content_type, {})
    assert note == media.FitNote()
