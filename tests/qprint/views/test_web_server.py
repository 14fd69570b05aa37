"""What qprint changes in Daphne's stack (``qprint.views.web_server``): each change made once;
autobahn's options line under the socket built only when written, every option still reaching
the connection; a socket not read while too many of its frames wait, and read again once they
are taken, every frame in the queue in order. (Twisted's form parsing, off:
``test_http_uploads.py``, through a real node; a flooded socket under a real node:
``tests/qprint/realtime/test_socket_backpressure.py``.)"""

from __future__ import annotations

import asyncio

import daphne.ws_protocol
import pytest
import txaio
from autobahn.twisted.websocket import WebSocketServerFactory
from autobahn.websocket import protocol as autobahn_protocol
from twisted.logger import formatEvent

from qprint.views import web_server


@pytest.fixture
def printed(monkeypatch):
    """What autobahn pretty-prints from now on (its module's ``pformat``)."""
    seen = []
    real = autobahn_protocol.pformat

    def pformat(value, *args, **kwargs):
        seen.append(value)
        return real(value, *args, **kwargs)

    monkeypatch.setattr(autobahn_protocol, "pformat", pformat)
    return seen


def connection(log=None):
    """A new connection of Daphne's protocol set up by its factory: one option the factory sets,
    one set on the connection itself (autobahn keeps the connection's)."""
    factory = WebSocketServerFactory()
    factory.setProtocolOptions(autoPingInterval=7, openHandshakeTimeout=9)
    socket = daphne.ws_protocol.WebSocketProtocol()
    socket.factory = factory
    socket.openHandshakeTimeout = 3
    if log is not None:
        socket.log = log
    socket._connectionMade()
    return socket, factory


def test_each_change_is_made_once_where_daphne_runs():
    from daphne.http_protocol import WebRequest
    from daphne.ws_protocol import WebSocketProtocol

    web_server.install()
    changed = WebRequest.__init__, WebSocketProtocol._connectionMade, WebSocketProtocol.onMessage
    assert all(hasattr(function, "__wrapped__") for function in changed)
    assert web_server.form_parsing_off() is True
    assert web_server.options_line_when_written() is True
    assert web_server.reading_paused_when_behind() is True
    again = WebRequest.__init__, WebSocketProtocol._connectionMade, WebSocketProtocol.onMessage
    assert again == changed  # not wrapped again


def test_without_debug_logging_the_options_are_copied_and_not_printed(printed):
    web_server.options_line_when_written()
    socket, factory = connection()
    assert not web_server.writes_debug(socket.log)
    assert not any(printed), printed  # autobahn's loop found nothing left to print
    assert socket.autoPingInterval == 7
    assert socket.openHandshakeTimeout == 3
    for name in type(socket).CONFIG_ATTRS:
        if name != "openHandshakeTimeout":
            assert getattr(socket, name) == getattr(factory, name), name


def test_with_debug_logging_autobahn_writes_every_option():
    web_server.options_line_when_written()
    lines = []
    socket, factory = connection(txaio.make_logger("debug", observer=lines.append))
    assert web_server.writes_debug(socket.log)
    (written,) = [formatEvent(event) for event in lines if "attrs" in event]
    for name in type(socket).CONFIG_ATTRS:
        assert f"'{name}'" in written, name
    assert f"('autoPingInterval', 7, '{type(factory).__name__}')" in written
    assert f"('openHandshakeTimeout', 3, '{type(socket).__name__}')" in written
    assert socket.autoPingInterval == 7
    assert socket.openHandshakeTimeout == 3


def test_a_logger_of_another_kind_keeps_autobahns_way():
    assert web_server.writes_debug(object())


@pytest.mark.parametrize("level", txaio.interfaces.log_levels)
def test_a_logger_writes_debug_lines_at_debug_and_trace_only(level):
    log = txaio.make_logger(level)
    assert web_server.writes_debug(log) == (level in ("debug", "trace"))


class Transport:
    """A TCP transport as a producer: read or not."""

    def __init__(self) -> None:
        self.reading = True

    def pauseProducing(self) -> None:
        self.reading = False

    def resumeProducing(self) -> None:
        self.reading = True


@pytest.fixture
def checks(monkeypatch):
    """The checks of paused sockets asked for (the reactor is not running here)."""
    asked = []
    monkeypatch.setattr(web_server, "_check_later", asked.append)
    web_server.reading_paused_when_behind()
    return asked


def open_socket():
    """A connection of Daphne's protocol, open, with its application's queue."""
    socket = daphne.ws_protocol.WebSocketProtocol()
    socket.transport = Transport()
    socket.application_queue = asyncio.Queue()
    socket.client_addr = None
    socket.state = socket.STATE_OPEN
    return socket


def taken(socket, count: int) -> list[str]:
    return [socket.application_queue.get_nowait()["text"] for _ in range(count)]


def test_a_socket_is_not_read_while_its_frames_wait_and_is_read_again_once_they_are_taken(checks):
    socket = open_socket()
    bound = web_server.PAUSE_AT_FRAMES
    for n in range(bound - 1):
        socket.onMessage(str(n).encode(), False)
    assert socket.transport.reading and not checks
    socket.onMessage(str(bound - 1).encode(), False)
    assert not socket.transport.reading
    assert checks == [socket]
    socket.transport.resumeProducing()  # were anything else to resume it, the next frame pauses
    socket.onMessage(str(bound).encode(), False)  # the rest of a read: queued, not dropped
    assert not socket.transport.reading
    assert checks == [socket]  # one check on its way, not one per frame

    sent = [str(n) for n in range(bound + 1)]
    received = taken(socket, bound + 1 - web_server.RESUME_AT_FRAMES - 1)
    web_server.resume_when_drained(socket)
    assert not socket.transport.reading
    assert checks == [socket, socket]  # looked at again later
    received += taken(socket, 1)
    web_server.resume_when_drained(socket)
    assert socket.transport.reading
    assert checks == [socket, socket]
    received += taken(socket, web_server.RESUME_AT_FRAMES)
    assert received == sent  # every frame, in order

    for n in range(bound):
        socket.onMessage(str(n).encode(), False)
    assert not socket.transport.reading
    assert checks == [socket, socket, socket]  # paused again: a new check


def test_a_socket_closed_while_paused_is_left_alone(checks):
    socket = open_socket()
    for n in range(web_server.PAUSE_AT_FRAMES):
        socket.onMessage(str(n).encode(), False)
    socket.state = socket.STATE_CLOSED
    web_server.resume_when_drained(socket)
    assert not socket.transport.reading
    assert checks == [socket]
