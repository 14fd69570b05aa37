"""Django's middleware of the example project, run on the event loop without a thread hop.

Under ASGI, Django's ``MiddlewareMixin`` runs every ``process_request`` and ``process_response``
through ``sync_to_async`` (a hop to the request's thread and back) even when the hook does no
I/O: seven middleware cost fourteen hops per request, a large share of a short API request. The
hooks of the middleware below do no I/O except where noted, so these subclasses call them on the
event loop directly, and hop to a thread only when a hook is about to touch the database:

- the session is saved (``SessionMiddleware``: the session was modified, or
  ``SESSION_SAVE_EVERY_REQUEST``);
- the messages are stored (``MessageMiddleware``: messages were read or added; the session
  storage may load the session).

``CsrfViewMiddleware.process_view`` is a coroutine for the same reason (Django's handler hops to
a thread for a synchronous one). Everything else (headers, redirects, CSRF checks against the
cookie, the lazy ``request.user``)
is the same code as Django's, called in the same order. Under WSGI or Django's test client
(synchronous) they are Django's classes unchanged.
"""

from asgiref.sync import sync_to_async
from django.conf import settings
from django.contrib.auth.middleware import AuthenticationMiddleware as _Authentication
from django.contrib.messages.middleware import MessageMiddleware as _Messages
from django.contrib.sessions.middleware import SessionMiddleware as _Sessions
from django.middleware.clickjacking import XFrameOptionsMiddleware as _XFrameOptions
from django.middleware.common import CommonMiddleware as _Common
from django.middleware.csrf import CsrfViewMiddleware as _Csrf
from django.middleware.security import SecurityMiddleware as _Security


class OnTheLoop:
    """For a ``MiddlewareMixin`` whose hooks do no I/O: run them inline in async mode."""

    def response_needs_thread(self, request, response) -> bool:
        return False

    async def __acall__(self, request):
        response = None
        if hasattr(self, "process_request"):
            response = self.process_request(request)
        response = response or await self.get_response(request)
        if hasattr(self, "process_response"):
            if self.response_needs_thread(request, response):
                return await sync_to_async(self.process_response, thread_sensitive=True)(
                    request, response
                )
            response = self.process_response(request, response)
        return response


class SecurityMiddleware(OnTheLoop, _Security):
    pass


class SessionMiddleware(OnTheLoop, _Sessions):
    def response_needs_thread(self, request, response) -> bool:
        session = getattr(request, "session", None)
        return session is not None and (session.modified or settings.SESSION_SAVE_EVERY_REQUEST)


class CommonMiddleware(OnTheLoop, _Common):
    pass


class CsrfViewMiddleware(OnTheLoop, _Csrf):
    async def process_view(self, request, callback, callback_args, callback_kwargs):
        # A coroutine, so Django's handler calls it on the loop instead of through a thread
        # (under the synchronous handler it is wrapped the other way, unchanged in effect).
        return super().process_view(request, callback, callback_args, callback_kwargs)


class AuthenticationMiddleware(OnTheLoop, _Authentication):
    pass


class MessageMiddleware(OnTheLoop, _Messages):
    def response_needs_thread(self, request, response) -> bool:
        storage = getattr(request, "_messages", None)
        return storage is not None and (storage.used or storage.added_new)


class XFrameOptionsMiddleware(OnTheLoop, _XFrameOptions):
    pass
