"""The web server's log of the device socket: a refused upgrade is one line, not a traceback.

Daphne answers a WebSocket upgrade with 500 when the application raises before accepting, and logs
``Exception inside application`` with the whole traceback. qprint raises
:class:`~qprint.realtime.consumer.UpgradeFailed` on purpose to refuse an upgrade with a 5xx (this
node is draining, the database did not answer, the client is throttled) and has logged
``socket_refused status=... code=...`` already: the filter here drops Daphne's copy. A socket URL
without a route (``No route found for path``: the agent's ``--url`` is not the mount of
``qprint.urls``) becomes one ``socket_no_route`` line. Every other exception is logged as Daphne
logs it.
"""

from __future__ import annotations

import logging

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
    """Add the filter to Daphne's logger once (in every process: harmless where Daphne is not)."""
    logger = logging.getLogger(DAPHNE_LOGGER)
    if not any(isinstance(f, RefusedUpgradeFilter) for f in logger.filters):
        logger.addFilter(RefusedUpgradeFilter())
