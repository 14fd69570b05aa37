"""The renderer draws real pages where they belong, and refuses hostile documents within its
bounds while the process that asked goes on rendering (docs/DOCUMENTS.md)."""

import io
import time

import pytest
from django.test import override_settings
from PIL import Image

from qprint.documents import render
from qprint.documents.render import (
    RenderRefused,
    page_count,
    page_sizes,
    render_page,
    render_strip,
)
from tests.qprint.documents import pdfs
from tests.qprint.documents.pdfs import MM, Page


@pytest.fixture(autouse=True, scope="module")
def stop_workers():
    yield
    render.workers.close()


def png(data: bytes) -> Image.Image:
    image = Image.open(io.BytesIO(data))
    assert image.format == "PNG"
    return image


def dark_box(image: Image.Image) -> tuple[int, int, int, int]:
    """The bounding box (left, top, right, bottom) of the dark pixels."""
    grey = image.convert("L")
    box = grey.point(lambda v: 255 if v < 128 else 0).getbbox()
    assert box is not None, "nothing dark on the page"
    return box


def expected_box(page: Page, box, width: int) -> tuple[float, float, float, float]:
    scale = width / page.width_mm
    left, top, w, h = box
    return (left * scale, top * scale, (left + w) * scale, (top + h) * scale)


def assert_close(actual, expected, tolerance=2):
    assert all(abs(a - e) <= tolerance for a, e in zip(actual, expected, strict=True)), (
        actual,
        expected,
    )


@pytest.mark.parametrize(
    ("page", "width"),
    [
        (Page(210, 297, [(20, 30, 40, 25)]), 600),  # A4
        (Page(297, 210, [(200, 150, 60, 40)]), 600),  # A4 landscape
        (Page(215.9, 279.4, [(0, 0, 25.4, 25.4)]), 800),  # Letter, box in the corner
        (Page(101.6, 152.4, [(10, 100, 80, 30)]), 812),  # a 4 x 6 in label at 203 dpi
        (Page(80, 200, [(5, 180, 70, 15)]), 576),  # a receipt, 80 mm paper at 576 dots
    ],
    ids=["a4", "a4-landscape", "letter", "label-4x6in", "receipt-80x200mm"],
)
def test_a_page_is_drawn_at_the_asked_width_with_its_box_in_place(page, width):
    image = png(render_page(pdfs.pdf([page]), "application/pdf", width=width))
    assert image.size == (width, round(page.height_mm * width / page.width_mm))
    assert image.mode == "RGB"
    assert_close(dark_box(image), expected_box(page, page.boxes[0], width))


def test_each_page_of_a_multi_page_document_is_its_own():
    document = pdfs.pdf(
        [
            Page(210, 297, [(10, 10, 30, 30)]),
            Page(297, 210, [(250, 160, 30, 30)]),
            Page(101.6, 152.4, [(50, 50, 20, 20)]),
        ]
    )
    assert page_count(document, "application/pdf") == 3
    sizes = page_sizes(document, "application/pdf")
    millimetres = [(round(w / MM), round(h / MM)) for w, h in sizes]
    assert millimetres == [(210, 297), (297, 210), (102, 152)]
    second = png(render_page(document, "application/pdf", page=2, width=594))
    assert second.size == (594, 420)
    assert_close(dark_box(second), (500, 320, 560, 380))
    third = png(render_page(document, "application/pdf", page=3, width=400))
    assert third.size == (400, 600)
    with pytest.raises(RenderRefused) as refused:
        render_page(document, "application/pdf", page=4, width=400)
    assert (refused.value.status, refused.value.code) == (422, "no_such_page")


def test_a_rotated_page_is_drawn_as_it_is_displayed():
    # A portrait page turned 90 degrees clockwise: displayed landscape, its top-left box now at
    # the top-right.
    page = Page(210, 297, [(0, 0, 30, 30)], rotate=90)
    image = png(render_page(pdfs.pdf([page]), "application/pdf", width=594))
    assert image.size == (594, 420)
    left, top, right, bottom = dark_box(image)
    assert right == 594 and top == 0 and abs(left - (594 - 60)) <= 2 and abs(bottom - 60) <= 2
    assert page_sizes(pdfs.pdf([page]), "application/pdf")[0] == pytest.approx(
        (297 * MM, 210 * MM), abs=0.01
    )


def test_gray_is_eight_bit_and_mono_one_bit_dithered():
    page = Page(80, 100, [(10, 10, 20, 20)])
    document = pdfs.pdf([page])
    grey = png(render_page(document, "application/pdf", width=576, mode="gray"))
    assert grey.mode == "L"
    mono = png(render_page(document, "application/pdf", width=576, mode="mono"))
    assert mono.mode == "1" and mono.size == (576, 720)
    assert_close(dark_box(mono), expected_box(page, page.boxes[0], 576))
    # A mid-grey area is dithered: about half of its dots black, not all white or all black.
    half = pdfs.write(
        [
            b"<< /Type /Catalog /Pages 2 0 R >>",
            b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 200 200] /Contents 4 0 R >>",
            pdfs.stream(b"0.5 g 0 0 200 200 re f"),
        ]
    )
    histogram = png(render_page(half, "application/pdf", width=200, mode="mono")).histogram()
    assert 0.4 < histogram[0] / (histogram[0] + histogram[255]) < 0.6


def test_a_strip_is_the_first_pages_one_under_the_other_one_bit():
    """A receipt printer's one image: each page at the width, in order, at most ``pages``."""
    document = pdfs.pdf(
        [
            Page(80, 40, [(0, 10, 80, 5)]),
            Page(80, 20, [(0, 15, 80, 5)]),
            Page(160, 40, [(0, 0, 160, 10)]),
        ]
    )
    image = png(render_strip(document, "application/pdf", pages=2, width=160))
    assert (image.mode, image.size) == ("1", (160, 80 + 40))
    black = [y for y in range(image.height) if image.getpixel((80, y)) == 0]
    first, second = black[:10], black[10:]
    assert (first, second) == (list(range(20, 30)), list(range(80 + 30, 80 + 40)))
    whole = png(render_strip(document, "application/pdf", pages=20, width=160))
    assert whole.size == (160, 80 + 40 + 40)
    colour = png(render_strip(document, "application/pdf", pages=1, width=160, mode="rgb"))
    assert (colour.mode, colour.size) == ("RGB", (160, 80))


def test_a_strip_of_an_image_is_the_image():
    source = Image.new("RGB", (400, 200), "white")
    data = io.BytesIO()
    source.save(data, "PNG")
    image = png(render_strip(data.getvalue(), "image/png", pages=20, width=200))
    assert (image.mode, image.size) == ("1", (200, 100))


def test_a_strip_is_bounded_as_a_whole_before_anything_is_drawn():
    """Pages within the pixel bound each, too many together: refused from the page sizes."""
    document = pdfs.pdf([Page(80, 100)] * 3)
    with override_settings(QPRINT={"RENDER_MAX_PIXELS": 576 * 720 * 2}):
        two = png(render_strip(document, "application/pdf", pages=2, width=576))
        assert two.size == (576, 1440)
        with pytest.raises(RenderRefused) as refused:
            render_strip(document, "application/pdf", pages=3, width=576)
    assert (refused.value.status, refused.value.code) == (422, "too_many_pixels")
    assert "3 pages at 576 wide would be 576 × 2160 pixels" in refused.value.message


@pytest.mark.parametrize("kind", ["PNG", "JPEG"])
def test_images_are_scaled_to_the_width(kind):
    source = Image.new("RGB", (400, 200), "white")
    source.paste((0, 0, 0), (100, 50, 200, 150))
    data = io.BytesIO()
    source.save(data, kind)
    content_type = f"image/{kind.lower()}"
    image = png(render_page(data.getvalue(), content_type, width=200))
    assert image.size == (200, 100)
    assert_close(dark_box(image), (50, 25, 100, 75))
    assert page_count(data.getvalue(), content_type) == 1
    assert page_sizes(data.getvalue(), content_type) == []


def test_a_transparent_png_is_drawn_on_white():
    source = Image.new("RGBA", (100, 100), (0, 0, 0, 0))
    source.paste((0, 0, 0, 255), (0, 0, 50, 50))
    data = io.BytesIO()
    source.save(data, "PNG")
    image = png(render_page(data.getvalue(), "image/png", width=100))
    assert image.getpixel((75, 75)) == (255, 255, 255)
    assert_close(dark_box(image), (0, 0, 50, 50))


@pytest.mark.parametrize(
    "content_type",
    [
        "application/vnd.zebra-zpl",
        "application/vnd.eltron-epl",
        "application/vnd.escpos",
        "application/vnd.star.starprnt",
        "application/vnd.cups-raw",
        "application/octet-stream",
        "text/plain; charset=utf-8",
    ],
)
def test_raw_printer_languages_have_no_preview(content_type):
    with pytest.raises(RenderRefused) as refused:
        render_page(b"^XA^FDhello^FS^XZ", content_type, width=600)
    assert (refused.value.status, refused.value.code) == (415, "no_preview")
    assert render.base_type(content_type) in refused.value.message


@pytest.mark.parametrize(
    ("document", "code"),
    [
        (pdfs.encrypted(), "encrypted_document"),
        (pdfs.garbage(), "broken_document"),
        (pdfs.pdf([Page(10_000, 10_000)]), "page_too_large"),  # 10 m x 10 m
        (pdfs.pdf([Page(10, 5000)]), "too_many_pixels"),  # 1 cm x 5 m: 600 x 300,000 pixels
        (pdfs.many_pages(20_000), "too_many_pages"),
        (pdfs.content_bomb(), "render_failed"),  # inflates to 1 GiB in a 512 MiB worker
    ],
    ids=["encrypted", "garbage", "10m-page", "too-tall", "20000-pages", "decompression-bomb"],
)
def test_hostile_documents_are_refused_and_the_next_one_renders(document, code):
    with pytest.raises(RenderRefused) as refused:
        render_page(document, "application/pdf", width=600)
    assert (refused.value.status, refused.value.code) == (422, code)
    assert refused.value.message
    page = Page(100, 100, [(0, 0, 50, 50)])
    assert png(render_page(pdfs.pdf([page]), "application/pdf", width=100)).size == (100, 100)


def test_a_huge_image_is_refused_before_it_is_decoded():
    source = Image.new("1", (6000, 5000))  # 30 million pixels, a few kilobytes as PNG
    data = io.BytesIO()
    source.save(data, "PNG")
    with pytest.raises(RenderRefused) as refused:
        render_page(data.getvalue(), "image/png", width=600)
    assert refused.value.code == "too_many_pixels"


def test_a_broken_cross_reference_table_is_repaired_or_refused_never_a_crash():
    # Every offset of the table is wrong: PDFium rebuilds the table from the objects themselves.
    page = Page(210, 297, [(20, 30, 40, 25)])
    image = png(render_page(pdfs.pdf([page], shift_xref=7), "application/pdf", width=600))
    assert_close(dark_box(image), expected_box(page, page.boxes[0], 600))
    truncated = pdfs.pdf([page])[:200]
    with pytest.raises(RenderRefused) as refused:
        render_page(truncated, "application/pdf", width=600)
    assert refused.value.code == "broken_document"


def test_a_document_slower_than_the_time_limit_is_stopped_there():
    bomb = pdfs.decompression_bomb()  # a 2 GiB picture: PDFium decodes it in a second or more
    with override_settings(QPRINT={"RENDER_TIMEOUT_SECONDS": 0.2}):
        started = time.monotonic()
        with pytest.raises(RenderRefused) as refused:
            render_page(bomb, "application/pdf", width=600)
        elapsed = time.monotonic() - started
    assert refused.value.code == "render_too_slow"
    assert elapsed < 5  # the limit plus killing the worker, not the picture's full decode
    assert png(render_page(pdfs.pdf([Page(50, 50)]), "application/pdf", width=50)).size == (50, 50)


def test_a_caller_beyond_the_workers_waits_the_time_limit_then_hears_busy():
    document = pdfs.pdf([Page(50, 50)])
    with override_settings(QPRINT={"RENDER_WORKERS": 1, "RENDER_TIMEOUT_SECONDS": 0.3}):
        render.workers.close()
        memory = render.qprint_settings.RENDER_MEMORY_BYTES
        held = render.workers._acquire(1, memory, time.monotonic() + 30)  # the only worker
        try:
            started = time.monotonic()
            with pytest.raises(render.RenderBusy) as refused:
                render_page(document, "application/pdf", width=50)
            assert time.monotonic() - started >= 0.3
            assert (refused.value.status, refused.value.code) == (503, "render_busy")
        finally:
            render.workers._release(held, healthy=True)
        assert png(render_page(document, "application/pdf", width=50)).size == (50, 50)


def test_bad_arguments_are_programming_errors():
    document = pdfs.pdf([Page(50, 50)])
    for kwargs in ({"width": 0}, {"width": 100, "page": 0}, {"width": 100, "mode": "cmyk"}):
        with pytest.raises(ValueError):
            render_page(document, "application/pdf", **kwargs)
    for kwargs in (
        {"width": 0, "pages": 1},
        {"width": 100, "pages": 0},
        {"width": 1, "pages": True},
    ):
        with pytest.raises(ValueError):
            render_strip(document, "application/pdf", **kwargs)


def test_the_cache_keeps_its_bound_least_recently_used_out_first():
    cache = render.PageCache()
    with override_settings(QPRINT={"RENDER_CACHE_BYTES": 4000}):
        for i in range(6):
            cache.put(("job", i), bytes(900))
        assert cache.bytes <= 4000 and len(cache) == 4
        assert cache.get(("job", 0)) is None and cache.get(("job", 5)) is not None
        cache.get(("job", 2))  # used: kept over 3 at the next eviction
        cache.put(("job", 6), bytes(900))
        assert cache.get(("job", 2)) is not None and cache.get(("job", 3)) is None
        cache.put(("big",), bytes(1001))  # more than a quarter of the bound: not kept
        assert cache.get(("big",)) is None


def test_a_refusal_is_kept_without_the_frames_that_held_the_document():
    """A raised exception holds its traceback, whose frames hold the document's bytes: the cache
    keeps the refusal's code and message only, and each hit raises a new one, so a cached
    refusal stays a few hundred bytes however often it is served."""
    import uuid

    key = (uuid.uuid4(), 1, 100, "rgb")
    document = bytes(1_000_000)

    def draw() -> bytes:
        assert document
        raise RenderRefused("broken_document", "The document is broken.")

    with pytest.raises(RenderRefused) as first:
        render.keep(key, draw)
    assert first.value.__traceback__ is not None
    kept = render.pages.get(key)
    assert kept.__traceback__ is None and kept.code == "broken_document"
    for _ in range(3):
        with pytest.raises(RenderRefused) as raised:
            render.keep(key, draw)
        assert raised.value is not kept and raised.value.message == "The document is broken."
    assert render.pages.get(key).__traceback__ is None
    render.pages.clear()
