"""Hostile documents against a live Daphne node: every one is refused with its code within its
bound, while the node goes on answering other requests (and drawing good pages) meanwhile and
after, and its render workers are its own children that it replaces."""

import base64
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from qprint import api
from tests.processes import listening_node
from tests.qprint.documents import pdfs
from tests.qprint.documents.pdfs import Page

pytestmark = [pytest.mark.slow, pytest.mark.services]

#: Each document and the refusals it may get. The bomb inflates past the worker's memory; on a
#: busy machine the time limit (1 s here) may come first: either bound stops it.
STOPPED = {"render_failed", "too_much_memory", "render_too_slow"}
HOSTILE = {
    "decompression-bomb": (pdfs.content_bomb(), STOPPED),
    "20000-pages": (pdfs.many_pages(20_000), {"too_many_pages"}),
    "10m-page": (pdfs.pdf([Page(10_000, 10_000)]), {"page_too_large"}),
    "corrupt": (pdfs.garbage(), {"broken_document"}),
    "encrypted": (pdfs.encrypted(), {"encrypted_document"}),
    "slow": (pdfs.decompression_bomb(3 << 30), {"render_too_slow"}),  # 3 GiB of pixels
}


@pytest.fixture
def node(subprocess_env):
    env = {**subprocess_env, "QQQ_NODE_ID": "render", "QPRINT_RENDER_TIMEOUT_SECONDS": "1"}
    with listening_node("render", env) as node:
        yield node


@pytest.fixture
def key(transactional_db):
    api.create_device("acme", "front-desk")
    return api.create_application_key("acme", "render")[1]


def submit(client: httpx.Client, content: bytes) -> str:
    answer = client.post(
        "/qprint/api/v1/jobs",
        json={
            "device": "front-desk",
            "content_type": "application/pdf",
            "content_base64": base64.b64encode(content).decode(),
        },
    )
    assert answer.status_code == 201, answer.text
    return answer.json()["id"]


def test_hostile_documents_are_refused_and_the_node_keeps_serving(node, key):
    base, process = node
    headers = {"Authorization": f"Bearer {key}"}
    with httpx.Client(base_url=base, headers=headers, timeout=60) as client:
        good = submit(client, pdfs.pdf([Page(101.6, 152.4, [(10, 10, 40, 20)])]))
        hostile = {name: submit(client, content) for name, (content, _) in HOSTILE.items()}

        stop = threading.Event()
        served: list[int] = []

        def keep_asking() -> None:  # another application, meanwhile
            with httpx.Client(base_url=base, headers=headers, timeout=30) as other:
                while not stop.is_set():
                    served.append(other.get("/qprint/api/v1/devices").status_code)

        def preview(job_id: str) -> tuple[int, str, float]:
            started = time.monotonic()
            answer = client.get(f"/qprint/api/v1/jobs/{job_id}/preview.png")
            error = answer.json()["error"] if answer.status_code != 200 else ""
            return answer.status_code, error, time.monotonic() - started

        watcher = threading.Thread(target=keep_asking)
        watcher.start()
        try:
            with ThreadPoolExecutor(len(hostile)) as pool:
                answers = dict(zip(hostile, pool.map(preview, hostile.values()), strict=True))
            picture = client.get(f"/qprint/api/v1/jobs/{good}/preview.png?width=300")
        finally:
            stop.set()
            watcher.join(30)

        for name, (status, error, seconds) in answers.items():
            # Two workers for six documents: a caller may wait for a worker (up to the limit)
            # and then be told render_busy; none waits for a document without end.
            refused = status == 422 and error in HOSTILE[name][1]
            assert refused or (status, error) == (503, "render_busy"), (name, status, error)
            assert seconds < 15, (name, seconds)
        assert sum(status == 422 for status, _, _ in answers.values()) >= 2
        assert picture.status_code == 200 and picture.headers["content-type"] == "image/png"
        assert served and set(served) == {200}
        assert process.alive()
        # Asked again, one at a time, each gets its refusal: the one it got (kept), or its own.
        for name, job_id in hostile.items():
            again = client.get(f"/qprint/api/v1/jobs/{job_id}/preview.png")
            assert again.status_code == 422, (name, again.text)
            first = answers[name][1]
            assert (
                again.json()["error"] == first
                if first != "render_busy"
                else (again.json()["error"] in HOSTILE[name][1])
            ), (name, again.text)
        assert client.get(f"/qprint/api/v1/jobs/{good}/preview.png").status_code == 200
