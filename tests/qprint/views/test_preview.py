"""``GET api/v1/jobs/<id>/preview.png``: a page of the job as a PNG, for the key's tenant only;
raw printer languages answer 415 ``no_preview``; pages are cached per (job, page, width)."""

import base64
import io

import pytest
from django.urls import reverse
from PIL import Image

from qprint import api
from qprint.documents import render
from tests.qprint.documents import pdfs
from tests.qprint.documents.pdfs import Page
from tests.qprint.factories import make_device, make_key

pytestmark = pytest.mark.django_db

LABEL = Page(101.6, 152.4, [(10, 10, 40, 20)])  # 4 x 6 in, a box 10 mm from the top-left
A4_THEN_LANDSCAPE = [Page(210, 297, [(0, 0, 105, 148.5)]), Page(297, 210, [(148.5, 105, 50, 50)])]


@pytest.fixture(autouse=True, scope="module")
def stop_workers():
    yield
    render.workers.close()


@pytest.fixture(autouse=True)
def empty_cache():
    render.pages.clear()
    yield
    render.pages.clear()


@pytest.fixture
def key():
    make_device("acme", "front-desk")
    return make_key("acme")


def submit(content: bytes, content_type: str = "application/pdf") -> str:
    job, _ = api.submit_job("acme", "front-desk", content, content_type)
    return str(job.pk)


def preview(client, key, job_id, **query):
    return client.get(reverse("qprint:job-preview", args=[job_id]), query, **key.auth)


def image(answer) -> Image.Image:
    assert answer.status_code == 200, answer.content[:300]
    assert answer["Content-Type"] == "image/png"
    assert answer["Cache-Control"].startswith("private")
    return Image.open(io.BytesIO(answer.content))


def dark_box(picture: Image.Image):
    return picture.convert("L").point(lambda v: 255 if v < 128 else 0).getbbox()


def test_the_first_page_at_600_pixels_by_default(client, key):
    job_id = submit(pdfs.pdf([LABEL]))
    picture = image(preview(client, key, job_id))
    assert picture.size == (600, 900)
    left, top, right, bottom = dark_box(picture)
    scale = 600 / 101.6  # pixels per millimetre
    assert abs(left - 10 * scale) <= 2 and abs(top - 10 * scale) <= 2
    assert abs(right - 50 * scale) <= 2 and abs(bottom - 30 * scale) <= 2


def test_page_and_width_are_chosen(client, key):
    job_id = submit(pdfs.pdf(A4_THEN_LANDSCAPE))
    first = image(preview(client, key, job_id, page=1, width=210))
    assert first.size == (210, 297)
    assert dark_box(first) == (0, 0, 105, 149)
    second = image(preview(client, key, job_id, page=2, width=1600))
    assert second.size == (1600, 1131)
    left, top, *_ = dark_box(second)
    assert abs(left - 148.5 * 1600 / 297) <= 2 and abs(top - 105 * 1600 / 297) <= 2


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ({"width": 1601}, "width"),
        ({"width": 0}, "width"),
        ({"width": "wide"}, "width"),
        ({"page": 0}, "page"),
        ({"page": "first"}, "page"),
    ],
)
def test_a_bad_page_or_width_is_422_naming_it(client, key, query, field):
    answer = preview(client, key, submit(pdfs.pdf([LABEL])), **query)
    assert answer.status_code == 422
    assert answer.json()["error"] == "invalid"
    assert answer.json()["message"].startswith(field)


def test_a_page_beyond_the_last_is_422(client, key):
    answer = preview(client, key, submit(pdfs.pdf([LABEL])), page=2)
    assert answer.status_code == 422
    assert answer.json()["error"] == "no_such_page"


@pytest.mark.parametrize(
    "content_type",
    ["application/vnd.zebra-zpl", "application/vnd.escpos", "application/vnd.eltron-epl"],
)
def test_raw_printer_languages_answer_415_no_preview(client, key, content_type):
    answer = preview(client, key, submit(b"^XA^FO50,50^FDqprint^FS^XZ", content_type))
    assert answer.status_code == 415
    body = answer.json()
    assert body["error"] == "no_preview"
    assert "printer language" in body["message"]


def test_images_are_previewed(client, key):
    source = Image.new("RGB", (1200, 600), "white")
    data = io.BytesIO()
    source.save(data, "JPEG")
    picture = image(preview(client, key, submit(data.getvalue(), "image/jpeg"), width=300))
    assert picture.size == (300, 150)


def test_another_tenants_key_gets_404(client, key):
    job_id = submit(pdfs.pdf([LABEL]))
    stranger = make_key("other")
    answer = preview(client, stranger, job_id)
    assert answer.status_code == 404
    assert answer.json()["error"] == "not_found"
    assert preview(client, key, "not-a-uuid").status_code == 404
    assert client.get(reverse("qprint:job-preview", args=[job_id])).status_code == 401


@pytest.mark.parametrize(
    ("document", "code"),
    [
        (pdfs.encrypted(), "encrypted_document"),
        (pdfs.garbage(), "broken_document"),
        (pdfs.many_pages(20_000), "too_many_pages"),
        (pdfs.pdf([Page(10_000, 10_000)]), "page_too_large"),
        (pdfs.content_bomb(), "render_failed"),
    ],
    ids=["encrypted", "garbage", "20000-pages", "10m-page", "decompression-bomb"],
)
def test_hostile_documents_answer_422_and_the_next_preview_renders(client, key, document, code):
    answer = preview(client, key, submit(document))
    assert answer.status_code == 422
    assert answer.json()["error"] == code
    assert image(preview(client, key, submit(pdfs.pdf([LABEL])), width=100)).size == (100, 150)


def test_pages_are_cached_per_job_page_and_width(client, key, monkeypatch):
    job_id = submit(pdfs.pdf(A4_THEN_LANDSCAPE))
    drawn = []
    real = render.render_page

    def counting(*args, **kwargs):
        drawn.append((kwargs["page"], kwargs["width"]))
        return real(*args, **kwargs)

    monkeypatch.setattr(render, "render_page", counting)
    first = preview(client, key, job_id, width=300).content
    assert preview(client, key, job_id, width=300).content == first
    preview(client, key, job_id, width=301)
    preview(client, key, job_id, page=2, width=300)
    assert drawn == [(1, 300), (1, 301), (2, 300)]
    # A refusal is kept too: a hostile document is not drawn again on every request.
    bomb = submit(pdfs.content_bomb())
    assert preview(client, key, bomb).status_code == 422
    assert preview(client, key, bomb).json()["error"] == "render_failed"
    assert drawn[3:] == [(1, 600)]


def test_a_document_that_is_gone_is_404(client, key):
    from qprint.documents import storage

    job_id = submit(pdfs.pdf([LABEL]))
    storage.delete_documents([job_id])
    answer = preview(client, key, job_id)
    assert answer.status_code == 404


def test_base64_submission_then_preview_over_http(client, key):
    content = pdfs.pdf([LABEL])
    job = client.post(
        reverse("qprint:jobs"),
        {
            "device": "front-desk",
            "content_type": "application/pdf",
            "content_base64": base64.b64encode(content).decode(),
        },
        content_type="application/json",
        **key.auth,
    ).json()
    assert image(preview(client, key, job["id"], width=812)).size == (812, 1218)
