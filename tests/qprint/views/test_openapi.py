"""``docs/openapi.yaml`` stays in step with ``qprint.urls``: the same routes, the same methods, a
valid OpenAPI 3.1 document, and real answers that match its schemas."""

import base64
import re
from pathlib import Path

import jsonschema
import pytest
import yaml
from django.urls import URLPattern, URLResolver, reverse
from openapi_spec_validator import validate

import qprint.urls
from tests.qprint.factories import connect, make_device, make_key

OPENAPI = Path(__file__).resolve().parents[3] / "docs" / "openapi.yaml"
HTTP_METHODS = {"get", "put", "post", "delete", "patch", "head", "options"}


@pytest.fixture(scope="module")
def document() -> dict:
    return yaml.safe_load(OPENAPI.read_text())


def routes(patterns, prefix: str = ""):
    """``(openapi path, allowed methods)`` of every route, converters as ``{name}``."""
    for p in patterns:
        if isinstance(p, URLResolver):
            yield from routes(p.url_patterns, prefix + str(p.pattern))
        elif isinstance(p, URLPattern):
            path = re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", prefix + str(p.pattern))
            methods = {m.lower() for m in getattr(p.callback, "allowed_methods", ())}
            yield "/" + path, methods


def test_openapi_document_is_valid_openapi_3_1(document):
    assert document["openapi"].startswith("3.1")
    validate(document)


def test_every_route_is_documented_and_every_documented_path_exists(document):
    served = dict(routes(qprint.urls.urlpatterns))
    documented = {
        path: {m for m in item if m in HTTP_METHODS} for path, item in document["paths"].items()
    }
    assert set(served) == set(documented)
    for path, methods in served.items():
        assert methods, f"{path}: the view does not declare its methods"
        assert methods == documented[path], path


def schema_of(document: dict, name: str) -> dict:
    return {"components": document["components"], "$ref": f"#/components/schemas/{name}"}


@pytest.mark.django_db
def test_real_answers_match_the_documented_schemas(client, document):
    key = make_key()
    dev = make_device()
    connect(dev.device)
    job = client.post(
        reverse("qprint:jobs"),
        {
            "device": "front-desk",
            "content_type": "application/pdf",
            "content_base64": base64.b64encode(b"%PDF-1.4").decode(),
        },
        content_type="application/json",
        **key.auth,
    ).json()
    assignment = client.post(reverse("qprint:device-claim"), **dev.auth).json()
    detail = client.get(reverse("qprint:job-detail", args=[job["id"]]), **key.auth).json()
    device = client.get(reverse("qprint:device-detail", args=["front-desk"]), **key.auth).json()
    error = client.get(reverse("qprint:jobs")).json()
    enrolment = client.post(
        reverse("qprint:device-enrollments"), {"agent_info": {}}, content_type="application/json"
    ).json()

    for name, instance in [
        ("Job", job),
        ("Assignment", assignment),
        ("JobWithEvents", detail),
        ("DeviceSummary", device),
        ("Error", error),
        ("EnrolmentStarted", enrolment),
    ]:
        jsonschema.Draft202012Validator(schema_of(document, name)).validate(instance)
