"""``/metrics`` of the example project: behind ``METRICS_TOKEN`` when it is set, and a scrape storm
costs the database one collection per ``METRICS_CACHE_SECONDS``."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from qcluster.models import ClusterNode
from tests.exposition import value

pytestmark = pytest.mark.django_db


def test_metrics_are_open_when_no_token_is_set(client, settings):
    settings.METRICS_TOKEN = ""
    assert client.get("/metrics").status_code == 200


def test_with_a_token_set_only_its_bearer_gets_the_metrics(client, settings):
    settings.METRICS_TOKEN = "scrape-me-7f3a"
    for headers in ({}, {"HTTP_AUTHORIZATION": "Bearer wrong"}, {"HTTP_AUTHORIZATION": "Basic x"}):
        refused = client.get("/metrics", **headers)
        assert refused.status_code == 401
        assert refused.json()["error"] == "unauthorized"
        assert refused["WWW-Authenticate"].startswith("Bearer")
        assert b"qcluster_nodes" not in refused.content
    allowed = client.get("/metrics", HTTP_AUTHORIZATION="Bearer scrape-me-7f3a")
    assert allowed.status_code == 200 and b"qcluster_nodes" in allowed.content


def test_a_scrape_storm_reads_the_database_once_per_cache_period(client, settings):
    settings.METRICS_CACHE_SECONDS = 0
    with CaptureQueriesContext(connection) as uncached:
        client.get("/metrics")
    assert len(uncached) >= 5  # the aggregates of both apps, read at that scrape

    settings.METRICS_CACHE_SECONDS = 3600
    client.get("/metrics")  # fills the cache
    ClusterNode.objects.create(node_id="storm-node", status="UP", roles="web")
    with CaptureQueriesContext(connection) as storm:
        answers = [client.get("/metrics") for _ in range(50)]
    assert len(storm) == 0
    assert all(a.status_code == 200 for a in answers)
    # The figures are the cached ones until the period ends; this process's own are live.
    text = answers[-1].content.decode()
    assert value(text, "qcluster_nodes", status="UP") == 0
    assert value(text, "process_resident_memory_bytes") is not None

    settings.METRICS_CACHE_SECONDS = 0
    assert value(client.get("/metrics").content.decode(), "qcluster_nodes", status="UP") == 1
