"""qprint's busiest API routes served without Django's per-request machinery.

A device's claim, download and events and an application's submission are short JSON requests,
made for every job. Under Django's ASGI handler each also pays for what it does not use: a thread
made per request (``ThreadSensitiveContext``), two hops to it and back for the
``request_started`` and ``request_finished`` signals and the response's ``close()``, a task that
listens for the client's disconnect, and the project's whole middleware chain. That was a quarter
of a node's samples in the HTTP flood (docs/PERFORMANCE.md, "Serving the API directly").

:class:`DirectRoutes` sits in front of the project's HTTP application (``qprint.routing.
http_application``). A request whose path resolves, in the project's URLconf, to one of qprint's
async API views (``run_async=True`` in :mod:`qprint.views.http`, marked ``direct``) is served
here: its body is read and its ``HttpRequest`` built by Django's own ASGI code, the same view
runs (method check on the event loop, its work on the node's HTTP database threads), and the
answer is sent. Everything else goes to the project's application untouched.

What these routes keep of Django's request cycle: the ``Host`` header is validated against
``ALLOWED_HOSTS`` (400), and when the project lists Django's ``SecurityMiddleware`` it runs here
too (``SECURE_SSL_REDIRECT``'s redirect, HSTS and the other security headers). An unexpected
error is answered and logged as Django answers it (``response_for_exception``). What they do not
get: the project's other middleware, and the ``request_started``/``request_finished`` signals
(qprint's views hold no database connection of the request's: their threads take one from the
pool per call).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from asgiref.sync import sync_to_async
from django.conf import settings
from django.core.exceptions import RequestAborted
from django.core.handlers import base
from django.core.handlers.asgi import ASGIHandler, get_script_prefix
from django.core.handlers.exception import response_for_exception
from django.http import HttpRequest, HttpResponseBase
from django.middleware.security import SecurityMiddleware
from django.urls import ResolverMatch, get_resolver, set_script_prefix
from django.urls.exceptions import Resolver404
from django.utils.module_loading import import_string

ASGIApp = Callable[[dict, Callable, Callable], Awaitable[None]]


class _Reader(ASGIHandler):
    """Django's own reading of a request's body, building of its ``HttpRequest`` and sending of
    its response, without a middleware chain."""

    def __init__(self) -> None:
        base.BaseHandler.__init__(self)  # ASGIHandler's would load the project's middleware


def _security_middleware() -> SecurityMiddleware | None:
    """Django's ``SecurityMiddleware`` (or the project's subclass of it) when the project lists
    it, else ``None``."""
    for dotted in settings.MIDDLEWARE:
        cls = import_string(dotted)
        if isinstance(cls, type) and issubclass(cls, SecurityMiddleware):
            return cls(lambda request: None)
    return None


class DirectRoutes:
    """The project's HTTP application ``app``, with qprint's ``direct`` views served here.

    ``mount`` is the path where the project mounts ``qprint.urls`` (``/qprint/``): only a path
    under it is resolved here, so the project's other requests cost one string comparison.
    """

    def __init__(self, app: ASGIApp, mount: str) -> None:
        self.app = app
        self.mount = mount
        self.reader = _Reader()
        self.security = _security_middleware()

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        match = self.match(scope) if scope["type"] == "http" else None
        if match is None:
            await self.app(scope, receive, send)
        else:
            await self.serve(match, scope, receive, send)

    def match(self, scope: dict) -> ResolverMatch | None:
        """The route of a request this serves (a ``direct`` view of qprint), else ``None``."""
        path_info = scope["path"].removeprefix(get_script_prefix(scope))
        if not path_info.startswith(self.mount):
            return None
        try:
            match = get_resolver().resolve(path_info)
        except Resolver404:
            return None
        return match if getattr(match.func, "direct", False) else None

    async def serve(
        self, match: ResolverMatch, scope: dict, receive: Callable, send: Callable
    ) -> None:
        try:
            body_file = await self.reader.read_body(receive)
        except RequestAborted:
            return
        try:
            set_script_prefix(get_script_prefix(scope))
            request, refused = self.reader.create_request(scope, body_file)
            response = refused if request is None else await self.respond(request, match)
            await self.reader.send_response(response, send)
        finally:
            body_file.close()

    async def respond(self, request: HttpRequest, match: ResolverMatch) -> HttpResponseBase:
        request.resolver_match = match
        try:
            request.get_host()  # ALLOWED_HOSTS, as CommonMiddleware checks it: 400
            response = self.security and self.security.process_request(request)
            if not response:
                response = await match.func(request, *match.args, **match.kwargs)
        except Exception as exc:
            # As Django's handler answers it (400 a disallowed host, 500 a bug, logged and
            # signalled), off the event loop; asgiref hands the exception's info to the thread.
            response = await sync_to_async(response_for_exception, thread_sensitive=False)(
                request, exc
            )
        if self.security is not None:
            response = self.security.process_response(request, response)
        return response
