"""Raw printers for the tests: TCP listeners on 127.0.0.1 that behave like jammed printers."""

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
