"""The CloudPRNT endpoint's fixtures: its URL, a CloudPRNT device made through the API, and a
simulated Star printer polling it through the test client."""

import pytest
from django.urls import reverse

from qprint import api
from tests.qprint.cloudprnt.simulator import StarPrinter, over_test_client


@pytest.fixture
def url():
    return reverse("qprint:cloudprnt")


@pytest.fixture
def made():
    device, token = api.create_device("acme", "counter", kind="cloudprnt")
    return device, token


@pytest.fixture
def printer(client, url, made):
    device, token = made
    return StarPrinter(over_test_client(client, url), device.name, token)
