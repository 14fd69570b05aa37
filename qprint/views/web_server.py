"""Daphne's HTTP requests without Twisted's form parsing.

Daphne builds each HTTP request on Twisted's ``http.Request``, which, for every POST with a body
and a ``Content-Type``, parses that header with the standard library's ``email`` package and, for
a form (``multipart/form-data``, ``application/x-www-form-urlencoded``), the whole body into
``request.args``, on the reactor's thread, before the application is called. Daphne never reads
``args``: it hands the body to the ASGI application as it came. What that parsing costs
(docs/PERFORMANCE.md, "Twisted's form parsing"): about 0.1 ms of the event loop per POST (4 % of a
node's samples in the pushed flood, where a job is one POST), and, for a multipart submission,
the whole body parsed a second time, 0.2 s of a blocked event loop for 10 MiB, before qprint's
own upload handler applies its size limit. A multipart body that the ``email`` parser cannot
read was answered by Twisted itself, an HTML 400 and a closed connection, and never reached
qprint's JSON errors.

Twisted's ``Request`` takes ``parsePOSTFormSubmission=False`` for this; Daphne does not pass it.
:func:`install` makes it the default of Daphne's ``WebRequest`` in a process that runs Daphne (a
process where Daphne's HTTP module is not loaded is left alone), when the installed Twisted has
the parameter.
"""

from __future__ import annotations

import functools
import inspect
import sys

#: Set on Daphne's request class once :func:`install` changed it.
_MARK = "_qprint_form_parsing_off"


def install() -> bool:
    """Turn Twisted's form parsing off for Daphne's requests; True when it is off (now or
    already), False when Daphne is not loaded or Twisted has no such switch."""
    module = sys.modules.get("daphne.http_protocol")
    if module is None:
        return False
    request = module.WebRequest
    if getattr(request, _MARK, False):
        return True
    from twisted.web import http

    if "parsePOSTFormSubmission" not in inspect.signature(http.Request.__init__).parameters:
        return False
    original = request.__init__

    @functools.wraps(original)
    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("parsePOSTFormSubmission", False)
        original(self, *args, **kwargs)

    request.__init__ = __init__
    setattr(request, _MARK, True)
    return True
