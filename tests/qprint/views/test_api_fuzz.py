"""The HTTP APIs fuzzed with schemathesis against ``docs/openapi.yaml`` on a live Daphne node.

Every operation of the device and application APIs, with the right credentials (per security
scheme), with none, and a stateful phase that follows the document's links from ``POST jobs`` to
the job operations. Every check: no 5xx, no status the document does not list, every answer
matching its schema and content type, schema-valid requests accepted and invalid ones refused.

The short form runs in the suite (a few examples per operation). The long form raises the count:
``QPRINT_API_FUZZ_EXAMPLES=500 ./dev test tests/qprint/views/test_api_fuzz.py`` (docs/SECURITY.md).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from qprint import api
from tests.processes import REPO_ROOT, listening_node

pytestmark = [pytest.mark.services, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

OPENAPI = REPO_ROOT / "docs" / "openapi.yaml"
EXAMPLES = int(os.environ.get("QPRINT_API_FUZZ_EXAMPLES", "8"))
SEED = os.environ.get("QPRINT_API_FUZZ_SEED", "20261201")


@pytest.fixture
def node(subprocess_env):
    # Schemathesis sends many bad credentials on purpose: the throttle would answer 429 to
    # everything after a few (that answer is tested in test_auth_throttle.py).
    env = {**subprocess_env, "QQQ_NODE_ID": "fuzz", "QPRINT_AUTH_FAILURE_LIMIT": "1000000"}
    with listening_node("fuzz", env) as node:
        yield node


@pytest.fixture
def credentials(transactional_db):
    """A key of tenant acme with a device ``front-desk`` (and its token)."""
    _, key = api.create_application_key("acme", "fuzz")
    device, token = api.create_device("acme", "front-desk")
    return {"key": key, "token": token, "device": device}


def schemathesis(
    tmp_path: Path, base_url: str, auth: dict[str, str] | None, phases: str, *extra: str
) -> subprocess.CompletedProcess:
    config = tmp_path / "schemathesis.toml"
    lines = [
        "[checks]",
        "enabled = true",
        # A body made invalid by too many entries can be refused for its size first.
        "[checks.negative_data_rejection]",
        "expected-statuses = [400, 401, 403, 404, 405, 406, 409, 413, 415, 422, 428, 429]",
        # A webhook's URL must resolve to a public address (docs/WEBHOOKS.md); no schema can say
        # which names resolve, and the test machine resolves none: a valid-looking URL is 422.
        "[[operations]]",
        'include-operation-id = "createWebhook"',
        "checks.positive_data_acceptance.enabled = false",
        # The enrolment poll answers a well-formed but unknown device code 400 invalid_grant,
        # as the OAuth device grant says (docs/API.md, "Enrolment").
        "[[operations]]",
        'include-operation-id = "pollEnrolment"',
        "checks.positive_data_acceptance.enabled = false",
    ]
    if auth:
        lines.append("[auth.openapi.deviceToken]")
        lines.append(f'bearer = "{auth["token"]}"')
        lines.append("[auth.openapi.applicationKey]")
        lines.append(f'bearer = "{auth["key"]}"')
    config.write_text("\n".join(lines) + "\n")
    args = [
        sys.executable,
        "-m",
        "schemathesis.cli",
        "--config-file",
        str(config),
        "run",
        str(OPENAPI),
        "--url",
        f"{base_url}/qprint",
        "--phases",
        phases,
        "--max-examples",
        str(EXAMPLES),
        "--seed",
        SEED,
        "--workers",
        "1",
        "--request-timeout",
        "20",
        "--no-shrink",
        "--suppress-health-check",
        "all",
        *extra,
    ]
    return subprocess.run(
        args, capture_output=True, text=True, timeout=600, cwd=tmp_path, env=os.environ.copy()
    )


def assert_clean(result: subprocess.CompletedProcess, node_process) -> None:
    output = result.stdout + result.stderr
    if os.environ.get("QPRINT_API_FUZZ_OUTPUT"):
        Path(os.environ["QPRINT_API_FUZZ_OUTPUT"]).write_text(output)
    assert result.returncode == 0, (
        output[-20000:] + "\n--- node log ---\n" + node_process.log()[-5000:]
    )


def test_every_operation_with_credentials_answers_as_documented(node, credentials, tmp_path):
    base_url, process = node
    result = schemathesis(tmp_path, base_url, credentials, "examples,coverage,fuzzing,stateful")
    assert_clean(result, process)


def test_every_operation_without_credentials_answers_as_documented(node, credentials, tmp_path):
    base_url, process = node
    result = schemathesis(tmp_path, base_url, None, "examples,fuzzing")
    assert_clean(result, process)
