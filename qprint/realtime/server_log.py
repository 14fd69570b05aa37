"""The web server's log of the device socket: a refused upgrade is one line, not a traceback.

Daphne answers a WebSocket upgrade with 500 when the application raises before accepting, and logs
``Exception inside application`` with the whole traceback. qprint raises
:class:`~qprint.realtime.consumer.UpgradeFailed` on purpose to refuse an upgrade with a 5xx (this
node is draining, the database did not answer, the client is throttled) and has logged
``socket_refused status=... code=...`` already: the filter here drops Daphne's copy. A socket URL
without a route (``No route found for path``: the agent's ``--url`` is not the mount of
``qprint.urls``) becomes one ``socket_no_route`` line. Every other exception is logged as Daphne
logs it.

autobahn, under Daphne's socket, copies its factory's options onto each new connection and
pretty-prints all of them for a debug line, whether or not that line is written: measured with and
without, a sixth of a node's CPU per connect (docs/PERFORMANCE.md, "autobahn's options line").
Where the protocol's logger drops debug lines, the options are copied here, and autobahn's copy
finds nothing left to copy or print; with debug logging on, autobahn does both itself, as before.
"""

from __future__ import annotations

import functools
import logging
import sys

from txaio.interfaces import log_levels

from qprint.realtime.consumer import UpgradeFailed

#: Daphne's logger of application exceptions.
DAPHNE_LOGGER = "daphne.server"


class RefusedUpgradeFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, UpgradeFailed):
            return False  # the consumer logged socket_refused
        if isinstance(exc, ValueError) and str(exc).startswith("No route found for path"):
            record.msg = "socket_no_route error=%r hint=%s"
            record.args = (
                str(exc),
                "the socket is ws/device/ under the mount of qprint.urls (docs/INSTALL.md)",
            )
            record.levelno, record.levelname = logging.WARNING, "WARNING"
            record.exc_info = record.exc_text = None
        return True


def install() -> None:
    """Add the filter to Daphne's logger once (in every process: harmless where Daphne is not),
    and build autobahn's options line only when it is written (in a process running Daphne)."""
    logger = logging.getLogger(DAPHNE_LOGGER)
    if not any(isinstance(f, RefusedUpgradeFilter) for f in logger.filters):
        logger.addFilter(RefusedUpgradeFilter())
    options_line_when_written()


#: Set on Daphne's protocol class once :func:`options_line_when_written` changed it.
_MARK = "_qprint_options_line_when_written"


def writes_debug(log: object) -> bool:
    """Whether a txaio logger writes debug lines; True when it cannot tell (a logger of another
    kind keeps autobahn's own way)."""
    level = getattr(log, "_log_level", None)
    return level not in log_levels or log_levels.index(level) >= log_levels.index("debug")


def options_line_when_written() -> bool:
    """Wrap the connection set-up of Daphne's WebSocket protocol so that, while its logger drops
    debug lines, the factory's options are copied without the line that prints them. True when
    the wrap is in place (now or already), False when Daphne's socket is not loaded or autobahn
    has no such set-up."""
    module = sys.modules.get("daphne.ws_protocol")
    if module is None:
        return False
    protocol = module.WebSocketProtocol
    if getattr(protocol, _MARK, False):
        return True
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
    setattr(protocol, _MARK, True)
    return True
