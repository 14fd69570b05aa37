"""Raw printers for the tests: TCP listeners on 127.0.0.1 that behave like jammed printers."""

import socket
import threading


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
