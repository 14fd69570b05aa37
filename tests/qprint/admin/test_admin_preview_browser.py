"""The job page's preview in a real (headless) browser against a Daphne node: the thumbnail
beside the timeline is the document's first page, a click shows it larger (and its next page),
and a raw printer language says why there is no preview.

Needs Playwright and Debian's Chromium (``tests/browser.py``); ``QPRINT_SCREENSHOT_DIR=docs/img``
saves the screenshot of docs/DOCUMENTS.md.
"""

import pytest
from django.urls import reverse

from qprint import api
from tests.browser import browser_fixture, live_admin_site, new_page, screenshot, session_for
from tests.qprint.documents import pdfs
from tests.qprint.documents.pdfs import Page
from tests.qprint.factories import make_device

pytestmark = [pytest.mark.slow, pytest.mark.services]

browser = browser_fixture()


@pytest.fixture
def site(subprocess_env):
    with live_admin_site(subprocess_env, "node-a", runtime=False) as base:
        yield base


@pytest.fixture
def superuser(django_user_model):
    return django_user_model.objects.create_superuser("oncall", "oncall@example.com")


def natural_size(page, selector: str) -> tuple[int, int]:
    page.wait_for_function(
        "s => { const i = document.querySelector(s); return i && i.complete && i.naturalWidth }",
        arg=selector,
    )
    return tuple(page.eval_on_selector(selector, "i => [i.naturalWidth, i.naturalHeight]"))


def test_the_job_page_shows_the_page_that_is_printed(browser, site, superuser):
    device = make_device("acme", "zebra").device
    label_media = ["na_index-4x6_4x6in", "oe_4x4-label_4x4in", "oe_4x6-label_4x6in"]
    api.replace_printers(
        device,
        [
            {
                "name": "zebra",
                "is_default": True,
                "status": "idle",
                "capabilities": {"media": label_media},
            }
        ],
    )
    label = pdfs.pdf([pdfs.shipping_label(), Page(101.6, 152.4, [(10, 10, 20, 20)])])
    job, _ = api.submit_job("acme", device, label, "application/pdf", title="Label 42-1187")
    api.submit_job("acme", device, b"invoice", "text/plain", title="Invoice 7")  # an older one

    page = new_page(browser, site, session_for(superuser))
    page.goto(site + reverse("admin:qprint_printjob_change", args=[job.pk]))
    page.wait_for_selector("#qprint-timeline")
    # The thumbnail: page 1 at 280 pixels, beside the timeline (to its right, same row).
    assert natural_size(page, "#qprint-thumbnail-image") == (280, 420)
    timeline = page.locator("#qprint-timeline").bounding_box()
    thumbnail = page.locator("#qprint-thumbnail").bounding_box()
    assert thumbnail["x"] >= timeline["x"] + timeline["width"]
    assert thumbnail["y"] < timeline["y"] + timeline["height"]
    screenshot(page, "admin-job-preview")

    # Larger on click, and the next page.
    page.click("#qprint-thumbnail")
    assert page.eval_on_selector("#qprint-preview-dialog", "d => d.open")
    assert natural_size(page, "#qprint-preview-large") == (1200, 1800)
    screenshot(page, "admin-job-preview-large")
    first = page.get_attribute("#qprint-preview-large", "src")
    page.click('#qprint-preview-dialog [data-page="1"]')
    page.wait_for_function(
        "s => document.querySelector('#qprint-preview-large').src !== s", arg=first
    )
    assert page.inner_text("#qprint-preview-page") == "2"
    assert natural_size(page, "#qprint-preview-large") == (1200, 1800)
    # Beyond the last page the server says no_such_page and the dialog stays on page 2.
    with page.expect_response(lambda answer: "page=3" in answer.url) as beyond:
        page.click('#qprint-preview-dialog [data-page="1"]')
    assert beyond.value.status == 422
    assert page.inner_text("#qprint-preview-page") == "2"
    page.keyboard.press("Escape")

    # A raw printer language: no picture, and why.
    zpl, _ = api.submit_job("acme", device, b"^XA^FDhi^FS^XZ", "application/vnd.zebra-zpl")
    page.goto(site + reverse("admin:qprint_printjob_change", args=[zpl.pk]))
    reason = page.inner_text("#qprint-no-preview")
    assert "No preview." in reason and "printer language" in reason
    screenshot(page, "admin-job-no-preview")
    assert page.locator("#qprint-thumbnail").count() == 0
    answer = page.request.get(site + reverse("admin:qprint_printjob_preview", args=[zpl.pk]))
    assert answer.status == 415
    assert answer.headers["x-qprint-error"] == "no_preview"
