"""What qprint changes in the web server it runs under (Daphne, on Twisted and autobahn), in a
process that runs Daphne; each change is made once, and only where the installed version has
what it relies on.

**Twisted's form parsing, off.** Daphne builds each HTTP request on Twisted's ``http.Request``,
which, for every POST with a body and a ``Content-Type``, parses that header with the standard
library's ``email`` package and, for a form (``multipart/form-data``,
``application/x-www-form-urlencoded``), the whole body into ``request.args``, on the reactor's
thread, before the application is called. Daphne never reads ``args``: it hands the body to the
ASGI application as it came. What that parsing costs (docs/PERFORMANCE.md, "Twisted's form
parsing"): about 0.1 ms of the event loop per POST (4 % of a node's samples in the pushed flood,
where a job is one POST), and, for a multipart submission, the whole body parsed a second time,
0.2 s of a blocked event loop for 10 MiB, before qprint's own upload handler applies its size
limit. A multipart body that the ``email`` parser cannot read was answered by Twisted itself, an
HTML 400 and a closed connection, and never reached qprint's JSON errors. Twisted's ``Request``
takes ``parsePOSTFormSubmission=False`` for this; Daphne does not pass it:
:func:`form_parsing_off` makes it the default of Daphne's ``WebRequest``.

**autobahn's options line, built only when written.** autobahn, under Daphne's socket, copies
its factory's options onto each new connection and pretty-prints all of them for a debug line,
whether or not that line is written: measured with and without, a sixth of a node's CPU per
connect (docs/PERFORMANCE.md, "autobahn's options line"). :func:`options_line_when_written`
wraps that set-up on Daphne's protocol: where the connection's logger drops debug lines, the
options are copied here, and autobahn's copy finds nothing left to copy or print; with debug
logging on, autobahn does both itself, as before.

**A socket's frames, read no faster than they are handled.** Daphne puts every frame a
WebSocket brings into the application's queue as it arrives, and that queue has no bound: while
the application is busy with one frame (a statement waiting on a row lock, a slow database), a
client that keeps sending fills the node's memory, up to Daphne's message cap (1 MiB) a frame.
:func:`reading_paused_when_behind` stops reading a connection's socket while
:data:`PAUSE_AT_FRAMES` of its frames wait in that queue, so TCP pushes back: the frames wait
in the client's buffers and the kernel's. Reading starts again once no more than
:data:`RESUME_AT_FRAMES` wait, looked at every :data:`RESUME_CHECK_SECONDS` while paused and
never otherwise. No frame is dropped or reordered: the bytes stay in the socket, in order, and
the client's close and its answers to pings are read after the frames before them. A pause that
outlasts Daphne's ping interval and timeout (20 s and 30 s by default) ends as a silent client's
would: autobahn drops the connection, its pong unread.
"""

from __future__ import annotations

import functools
import inspect
import sys
from collections.abc import Callable

#: The levels of autobahn's (txaio's) loggers that drop debug lines.
QUIET_LEVELS = frozenset({"none", "critical", "error", "warn", "info"})

#: A socket is not read while this many of its frames wait in the application's queue. An
#: application takes its frames one at a time: more waiting in the node make it no faster, and
#: each may be 1 MiB (Daphne's message cap). qprint's device socket holds as many again in its
#: mailbox (``qprint.realtime.mailbox``): a socket is not read once 16 of its frames wait in the
#: node. autobahn queues every frame of the read that reached the bound (one read is at most
#: 64 KiB of the socket: at worst a few thousand empty frames, about 2 MB as messages).
PAUSE_AT_FRAMES = 8
#: A paused socket is read again once no more than this many of its frames wait: the application
#: still has frames to take while the next ones are read.
RESUME_AT_FRAMES = 2
#: How often a paused socket's queue is looked at, in seconds (a socket not paused costs nothing:
#: each frame's arrival compares the queue's length with :data:`PAUSE_AT_FRAMES`, no more).
RESUME_CHECK_SECONDS = 0.02


def install() -> None:
    """The three changes, in a process that runs Daphne (elsewhere nothing is changed)."""
    form_parsing_off()
    options_line_when_written()
    reading_paused_when_behind()


def _change_once(module_name: str, class_name: str, change: Callable[[type], bool]) -> bool:
    """Apply ``change`` to the class ``class_name`` of ``module_name`` once, when that module is
    loaded (Daphne runs in this process). True when the change is in place (now or already),
    False when the module is not loaded or ``change`` found nothing to change (it says so by
    returning False)."""
    module = sys.modules.get(module_name)
    if module is None:
        return False
    cls = getattr(module, class_name)
    mark = f"_qprint_{change.__name__}"
    if getattr(cls, mark, False):
        return True
    if not change(cls):
        return False
    setattr(cls, mark, True)
    return True


def form_parsing_off() -> bool:
    """Turn Twisted's form parsing off for Daphne's requests; True when it is off (now or
    already), False when Daphne is not loaded or Twisted has no such switch."""
    return _change_once("daphne.http_protocol", "WebRequest", _without_form_parsing)


def _without_form_parsing(request: type) -> bool:
    from twisted.web import http

    if "parsePOSTFormSubmission" not in inspect.signature(http.Request.__init__).parameters:
        return False
    original = request.__init__

    @functools.wraps(original)
    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("parsePOSTFormSubmission", False)
        original(self, *args, **kwargs)

    request.__init__ = __init__
    return True


def writes_debug(log: object) -> bool:
    """Whether a txaio logger (autobahn's) writes debug lines; True when it cannot tell (a logger
    of another kind keeps autobahn's own way)."""
    return getattr(log, "_log_level", None) not in QUIET_LEVELS


def options_line_when_written() -> bool:
    """Wrap the connection set-up of Daphne's WebSocket protocol so that, while its logger drops
    debug lines, the factory's options are copied without the line that prints them. True when
    the wrap is in place (now or already), False when Daphne's socket is not loaded or autobahn
    has no such set-up."""
    return _change_once("daphne.ws_protocol", "WebSocketProtocol", _options_copied_quietly)


def _options_copied_quietly(protocol: type) -> bool:
    if not hasattr(protocol, "_connectionMade") or not hasattr(protocol, "CONFIG_ATTRS"):
        return False
    original = protocol._connectionMade

    @functools.wraps(original)
    def _connectionMade(self) -> None:
        if not writes_debug(self.log):
            # autobahn's copy: an option set on the connection stays, the rest is the factory's.
            for name in self.CONFIG_ATTRS:
                if not hasattr(self, name):
                    setattr(self, name, getattr(self.factory, name))
            self.CONFIG_ATTRS = ()  # autobahn's loop then copies and prints nothing
        original(self)

    protocol._connectionMade = _connectionMade
    return True


def reading_paused_when_behind() -> bool:
    """Stop reading a Daphne WebSocket while :data:`PAUSE_AT_FRAMES` of its frames wait in its
    application's queue, and read it again once no more than :data:`RESUME_AT_FRAMES` do. True
    when the change is in place (now or already), False when Daphne's socket is not loaded or
    has not what the change relies on (its frame handler, its application's queue, autobahn's
    states)."""
    return _change_once("daphne.ws_protocol", "WebSocketProtocol", _paused_when_behind)


def _paused_when_behind(protocol: type) -> bool:
    relied_on = ("onMessage", "applicationCreateWorked", "STATE_CLOSED")
    if not all(hasattr(protocol, name) for name in relied_on):
        return False
    original = protocol.onMessage

    @functools.wraps(original)
    def onMessage(self, payload: bytes, isBinary: bool) -> None:
        original(self, payload, isBinary)
        if self.application_queue.qsize() >= PAUSE_AT_FRAMES:
            pause_reading(self)

    protocol.onMessage = onMessage
    protocol._qprint_reading_paused = False
    return True


def pause_reading(connection) -> None:
    """Stop reading ``connection`` (Daphne's ``WebSocketProtocol``) and look at its queue every
    :data:`RESUME_CHECK_SECONDS` until it has drained. The transport is paused again at every
    frame that arrives over the bound (the rest of the read that reached it): nothing while it is
    paused, and should anything else resume the transport, one read more comes in, no more."""
    connection.transport.pauseProducing()
    if not connection._qprint_reading_paused:
        connection._qprint_reading_paused = True
        _check_later(connection)


def resume_when_drained(connection) -> None:
    """Read ``connection`` again when no more than :data:`RESUME_AT_FRAMES` of its frames wait;
    otherwise look again later. A closed connection is left alone."""
    if connection.state == connection.STATE_CLOSED:
        connection._qprint_reading_paused = False
    elif connection.application_queue.qsize() > RESUME_AT_FRAMES:
        _check_later(connection)
    else:
        connection._qprint_reading_paused = False
        connection.transport.resumeProducing()


def _check_later(connection) -> None:
    from twisted.internet import reactor  # Daphne's (on asyncio's loop), installed by now

    reactor.callLater(RESUME_CHECK_SECONDS, resume_when_drained, connection)
