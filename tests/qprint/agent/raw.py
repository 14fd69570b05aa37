"""Raw printers for the tests: TCP listeners on 127.0.0.1 that behave like jammed printers, and
one that works (:class:`RecordingPrinter`, with :func:`print_raw` to send it a job)."""

import base64
import collections
import hashlib
import socket
import threading
import time


class StallingPrinter:
    """A raw printer that accepts, reads a little, then stops reading (a jammed printer)."""

    def __init__(self):
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.connections = 0
        self.first_bytes = threading.Event()
        self._conns = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            self.connections += 1
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            conn.recv(1024)
            self.first_bytes.set()
            self._conns.append(conn)  # never read again, never closed

    def close(self):
        self.server.close()
        for conn in self._conns:
            conn.close()


class ClosingPrinter:
    """A raw printer that reads ``close_after`` bytes of the first job, then resets the
    connection (a printer switched off mid-document)."""

    def __init__(self, close_after: int = 64 * 1024):
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.close_after = close_after
        self.received = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        try:
            conn, _ = self.server.accept()
        except OSError:
            return
        while self.received < self.close_after:
            chunk = conn.recv(65536)
            if not chunk:
                break
            self.received += len(chunk)
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\0\0\0\0\0\0\0")
        conn.close()  # with unread data and linger 0: a reset

    def close(self):
        self.server.close()


class RecordingPrinter:
    """A raw printer that works: it reads each job to its end and keeps the bytes."""

    def __init__(self):
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.documents: list[bytes] = []
        threading.Thread(target=self._serve, daemon=True).start()

    @property
    def uri(self) -> str:
        return f"socket://127.0.0.1:{self.port}"

    def _serve(self):
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            chunks = []
            with conn:
                while chunk := conn.recv(65536):
                    chunks.append(chunk)
            self.documents.append(b"".join(chunks))

    def close(self):
        self.server.close()


def submit_raw(
    mount: str, key: str, device: str, document: bytes, *, http_timeout: float = 60, **fields
):
    """Submit ``document`` as ZPL to ``device`` through the application API at ``mount``
    (``http://host:port/qprint/``) with the application key ``key``; the HTTP response."""
    import httpx

    return httpx.post(
        mount + "api/v1/jobs",
        headers={"Authorization": f"Bearer {key}"},
        json={
            "device": device,
            "content_type": "application/vnd.zebra-zpl",
            "content_base64": base64.b64encode(document).decode(),
            **fields,
        },
        timeout=http_timeout,
    )


def print_raw(mount: str, tenant: str, device: str, data: bytes, agent, timeout: float = 30):
    """Submit ``data`` (ZPL) to ``tenant``/``device`` through the application API at ``mount``
    (``http://host:port/qprint/``) and wait until the job is PRINTED."""
    from qprint import api
    from tests.waiting import wait_until

    _, key = api.create_application_key(tenant, f"raw-{device}")
    response = submit_raw(mount, key, device, data, http_timeout=10)
    assert response.status_code == 201, response.text
    job_id = response.json()["id"]
    wait_until(
        lambda: api.get_job(tenant, job_id).status == "PRINTED",
        timeout,
        message=f"job {job_id} PRINTED; agent log:\n{agent.log()[-3000:]}",
    )


class RecordingRawPrinter:
    """A raw (``socket://``) printer on 127.0.0.1: each connection's bytes are one delivery,
    recorded before the close that tells the agent the document was taken. ``read_delay``: a
    pause after each chunk read (a slow printer, so a kill often lands mid-document)."""

    def __init__(self, read_delay: float = 0.0, chunk: int = 65536):
        self.server = socket.create_server(("127.0.0.1", 0), backlog=64)
        self.port = self.server.getsockname()[1]
        self.address = f"127.0.0.1:{self.port}"
        self.read_delay = read_delay
        self.chunk = chunk
        self.deliveries: list[bytes] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            threading.Thread(target=self._read, args=(conn,), daemon=True).start()

    def _read(self, conn):
        data = bytearray()
        with conn:
            try:
                while chunk := conn.recv(self.chunk):
                    data += chunk
                    if self.read_delay:
                        time.sleep(self.read_delay)
            except OSError:
                pass
            with self._lock:
                self.deliveries.append(bytes(data))

    def deliveries_by_sha256(self) -> collections.Counter:
        with self._lock:
            return collections.Counter(hashlib.sha256(d).hexdigest() for d in self.deliveries)

    def close(self):
        self.server.close()
