"""The API tests of this folder run twice: with Django's test client (Django's request cycle)
and with :class:`~tests.qprint.views.direct_client.DirectClient` (the node's ASGI application,
qprint's direct routes served by ``qprint.views.direct``): the same requests, the same answers."""

import pytest
from django.test import Client

from tests.qprint.views.direct_client import DirectClient


@pytest.fixture(params=["django", "direct"])
def client(request) -> Client:
    return DirectClient() if request.param == "direct" else Client()
