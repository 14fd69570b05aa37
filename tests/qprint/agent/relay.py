"""A byte relay between a TCP port and a Unix socket:
``python -m tests.qprint.agent.relay MODE ...``.

``tcp-to-unix PORT PATH`` listens on 127.0.0.1:PORT and forwards each connection to the Unix
socket PATH; ``unix-to-tcp PATH PORT`` listens on PATH and forwards to 127.0.0.1:PORT. A printer
that runs in a network namespace of its own (tests/qprint/agent/ippeve.py) is reached this way: the
filesystem is shared, the network is not, so nothing leaves loopback.
"""

import asyncio
import contextlib
import os
import sys


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (ConnectionError, OSError):
        writer.close()


async def _relay(reader, writer, connect) -> None:
    try:
        up_reader, up_writer = await connect()
    except OSError:
        writer.close()
        return
    await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
    for w in (writer, up_writer):
        with contextlib.suppress(OSError):
            w.close()


async def main(argv: list[str]) -> None:
    mode, *args = argv
    if mode == "tcp-to-unix":
        port, path = int(args[0]), args[1]
        server = await asyncio.start_server(
            lambda r, w: _relay(r, w, lambda: asyncio.open_unix_connection(path)),
            "127.0.0.1",
            port,
        )
    elif mode == "unix-to-tcp":
        path, port = args[0], int(args[1])
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        server = await asyncio.start_unix_server(
            lambda r, w: _relay(r, w, lambda: asyncio.open_connection("127.0.0.1", port)),
            path,
        )
        os.chmod(path, 0o666)
    else:
        raise SystemExit(f"unknown mode {mode!r}")
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main(sys.argv[1:]))
