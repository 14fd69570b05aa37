"""TLS for tests, on loopback only: self-signed certificates, and a TLS-terminating front for a
node that records every connection that did not speak TLS to it (what it was sent in the clear).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import socket
import ssl
import threading
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.processes import free_port

#: The first byte of every TLS connection (a handshake record).
TLS_HANDSHAKE = 0x16


def certificate(name: str, directory: Path) -> tuple[Path, Path]:
    """A self-signed certificate for ``name`` (its own CA), as PEM files."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / f"{name}.pem", directory / f"{name}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


class TlsFront:
    """``https://localhost:<port>`` in front of the plain node on ``upstream`` (what a TLS proxy or
    ingress is to a node), serving ``cert``. A connection whose first byte is not a TLS handshake
    is not served: what it sent is kept in :attr:`cleartext` (the request line and headers)."""

    def __init__(self, upstream: int, cert: Path, key: Path):
        self.upstream = upstream
        self.port = free_port()
        self.context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.context.load_cert_chain(cert, key)
        self.cleartext: list[bytes] = []
        self.tls_connections = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._listener = socket.create_server(("127.0.0.1", self.port))
        self._listener.setblocking(False)

    def start(self) -> TlsFront:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._accept(), self._loop)
        return self

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self._cancel_all(), self._loop).result(5)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._listener.close()
        self._loop.close()

    async def _cancel_all(self) -> None:
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _accept(self) -> None:
        while True:
            conn, _ = await self._loop.sock_accept(self._listener)
            self._loop.create_task(self._serve(conn))

    async def _serve(self, conn: socket.socket) -> None:
        first = await asyncio.to_thread(_peek, conn)
        if first != TLS_HANDSHAKE:
            self.cleartext.append(await asyncio.to_thread(_head, conn))
            conn.close()
            return
        self.tls_connections += 1
        reader = asyncio.StreamReader()
        protocol = asyncio.StreamReaderProtocol(reader)
        try:
            transport, _ = await self._loop.connect_accepted_socket(
                lambda: protocol, conn, ssl=self.context
            )
        except (OSError, ssl.SSLError):
            conn.close()
            return
        writer = asyncio.StreamWriter(transport, protocol, reader, self._loop)
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream)
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))


def _peek(conn: socket.socket) -> int | None:
    conn.setblocking(True)
    conn.settimeout(10)
    try:
        data = conn.recv(1, socket.MSG_PEEK)
    except OSError:
        data = b""
    finally:
        conn.setblocking(False)
    return data[0] if data else None


def _head(conn: socket.socket) -> bytes:
    """What a cleartext client sent, up to the end of its headers."""
    conn.setblocking(True)
    conn.settimeout(2)
    data = b""
    with contextlib.suppress(OSError):
        while b"\r\n\r\n" not in data and len(data) < 65536:
            chunk = conn.recv(65536)
            if not chunk:
                break
            data += chunk
    return data


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError, ssl.SSLError):
        pass
    finally:
        with contextlib.suppress(Exception):
            writer.close()
