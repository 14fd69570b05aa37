"""What docs/deploy/ ships is checked against the code: the alerting rules (promtool), the Grafana
dashboard, the Kubernetes manifests (kubernetes-validate, offline) and the Dockerfile."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests import services as service_discovery
from tests.processes import REPO_ROOT

DEPLOY = REPO_ROOT / "docs" / "deploy"
RULES = DEPLOY / "prometheus" / "alerts.yml"
DASHBOARD = DEPLOY / "grafana" / "qprint.json"
K8S = DEPLOY / "kubernetes"
#: Series Prometheus makes itself, not the nodes.
PROMETHEUS_OWN = {"up"}
KUBERNETES_VERSIONS = ["1.29.0", "1.33.0"]


def promtool() -> str:
    binary = shutil.which("promtool")
    if binary is None:
        reason = "no promtool (Debian package 'prometheus')"
        if service_discovery.required():  # CI installs it
            pytest.fail(reason)
        pytest.skip(reason)
    return binary


# -- alerting rules -----------------------------------------------------------------------------


def test_rules_pass_promtool_check():
    result = subprocess.run(
        [promtool(), "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_rules_pass_their_unit_tests():
    result = subprocess.run(
        [promtool(), "test", "rules", "alerts.test.yml"],
        cwd=RULES.parent,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_exposition_passes_promtool_check_metrics(client, db):
    """Prometheus's own lint of the names, types and help of what /metrics exports."""
    text = client.get("/metrics").content.decode()
    result = subprocess.run(
        [promtool(), "check", "metrics"], input=text, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_has_a_unit_test_and_a_runbook_in_operations_md():
    rules = [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]
    tested = {
        t["alertname"]
        for case in yaml.safe_load((RULES.parent / "alerts.test.yml").read_text())["tests"]
        for t in case.get("alert_rule_test", [])
        if t.get("exp_alerts")
    }
    operations = (REPO_ROOT / "docs" / "OPERATIONS.md").read_text()
    anchors = {_anchor(line) for line in operations.splitlines() if line.startswith("#")}
    for rule in rules:
        assert rule["alert"] in tested, f"{rule['alert']} never fires in alerts.test.yml"
        runbook = rule["annotations"]["runbook"]
        assert runbook.startswith("docs/OPERATIONS.md#"), runbook
        assert runbook.split("#", 1)[1] in anchors, f"{runbook}: no such heading"


def _anchor(heading: str) -> str:
    """GitHub's anchor of a Markdown heading."""
    text = heading.lstrip("#").strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


# -- every metric a query names is exported -----------------------------------------------------


def exported_names(text: str) -> set[str]:
    """The series names a scrape of ``text`` gives PromQL, from the families (so a labelled
    counter that has not counted yet still counts)."""
    from prometheus_client.parser import text_string_to_metric_families

    suffixes = {
        "counter": ["_total", "_created"],
        "histogram": ["_bucket", "_count", "_sum", "_created"],
        "summary": ["_count", "_sum", "_created", ""],
        "gauge": [""],
        "untyped": [""],
        "info": ["_info"],
    }
    names: set[str] = set()
    for family in text_string_to_metric_families(text):
        names.update(family.name + s for s in suffixes.get(family.type, [""]))
        if family.type in ("histogram", "summary"):
            names.add(family.name)  # as the docs name a histogram
        names.update(s.name for s in family.samples)
    return names


_IDENT = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_PROMQL_WORDS = {
    "sum", "max", "min", "avg", "count", "by", "without", "rate", "increase", "delta", "deriv",
    "histogram_quantile", "absent", "le", "or", "and", "unless", "on", "ignoring", "offset",
    "humanize", "bool", "inf", "nan", "e",
}  # fmt: skip


def metric_names_in(expr: str) -> set[str]:
    """Metric names in a PromQL expression: identifiers outside ``{...}`` and ``[...]`` that are
    not functions, keywords or the label names of ``by (...)``/``without (...)``."""
    bare = re.sub(r"\{[^}]*\}|\[[^\]]*\]|\"[^\"]*\"", " ", expr)
    bare = re.sub(r"\b(by|without|on|ignoring)\s*\([^)]*\)", " ", bare)
    return {
        m.group(0)
        for m in _IDENT.finditer(bare)
        if m.group(0) not in _PROMQL_WORDS and not bare[m.end() :].lstrip().startswith("(")
    }


def dashboard_queries() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    return [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]


def rule_queries() -> list[str]:
    return [r["expr"] for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]


def test_metric_names_are_found_in_queries():
    expr = "histogram_quantile(0.95, sum by (le) (rate(qprint_claim_duration_seconds_bucket[5m])))"
    assert metric_names_in(expr) == {"qprint_claim_duration_seconds_bucket"}
    assert metric_names_in('max(qcluster_lease_held{lease="x"}) == 0') == {"qcluster_lease_held"}


def test_every_metric_the_dashboard_and_the_rules_name_is_exported(client, db):
    response = client.get("/metrics")
    assert response.status_code == 200
    exported = exported_names(response.content.decode()) | PROMETHEUS_OWN
    queries = dashboard_queries() + rule_queries()
    assert len(queries) > 20
    for expr in queries:
        names = metric_names_in(expr)
        assert names, f"no metric in {expr!r}"
        assert names <= exported, f"{expr!r} names {sorted(names - exported)}, not exported"


def test_the_metrics_docs_promise_are_exported(client, db):
    """Every ``qprint_*``/``qcluster_*`` name in docs/ that the code does not define as something
    else (a table, an index, a command, a template tag) is a metric the nodes export."""
    exported = exported_names(client.get("/metrics").content.decode())
    other = names_that_are_not_metrics()
    promised: set[str] = set()
    for doc in (REPO_ROOT / "docs").glob("*.md"):
        promised.update(re.findall(r"\b(?:qprint|qcluster)_[a-z_]+", doc.read_text()))
    promised -= other
    assert {"qprint_jobs", "qcluster_nodes", "qprint_wake_latency_seconds"} <= promised
    missing = sorted(promised - exported)
    assert not missing, f"docs promise {missing}"


def names_that_are_not_metrics() -> set[str]:
    """Tables, constraints and indexes (the migrations), commands and template tag libraries
    (their modules), template tags (their functions)."""
    names: set[str] = set()
    for app in ("qprint", "qcluster"):
        root = REPO_ROOT / app
        for migration in (root / "migrations").glob("0*.py"):
            names.update(
                re.findall(r"[\"'](q(?:print|cluster)_[a-z_]+)[\"']", migration.read_text())
            )
        names.update(p.stem for p in root.glob("management/commands/*.py"))
        for library in root.glob("templatetags/*.py"):
            names.add(library.stem)
            names.update(re.findall(r"^def (\w+)", library.read_text(), re.M))
    # Table names Django derives (app label + model name) without writing them in a migration.
    from django.apps import apps

    names.update(m._meta.db_table for m in apps.get_models())
    return names


# -- Kubernetes manifests -------------------------------------------------------------------------


def kustomization() -> dict:
    return yaml.safe_load((K8S / "kustomization.yaml").read_text())


def manifests() -> dict[str, dict]:
    """kind -> object, of the files the kustomization lists."""
    objects = {}
    for name in kustomization()["resources"]:
        for doc in yaml.safe_load_all((K8S / name).read_text()):
            objects[doc["kind"]] = doc
    return objects


def test_the_kustomization_lists_every_manifest():
    listed = set(kustomization()["resources"])
    present = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml", "secret.example.yaml"}
    assert listed == present
    assert {"Deployment", "Service", "PodDisruptionBudget", "ConfigMap", "Job"} <= set(manifests())


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_manifests_validate_against_the_kubernetes_schemas(version):
    """Offline: kubernetes-validate carries the schemas; strict rejects unknown fields."""
    import kubernetes_validate

    files = [K8S / n for n in kustomization()["resources"]] + [K8S / "secret.example.yaml"]
    for path in files:
        for doc in yaml.safe_load_all(path.read_text()):
            kubernetes_validate.validate(doc, version, strict=True)


def test_an_invalid_manifest_is_refused():
    import kubernetes_validate

    deployment = manifests()["Deployment"]
    deployment["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["httpGet"][
        "pathh"
    ] = "/"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, KUBERNETES_VERSIONS[-1], strict=True)


def pod_spec() -> dict:
    return manifests()["Deployment"]["spec"]["template"]["spec"]


def containers() -> dict[str, dict]:
    return {c["name"]: c for c in pod_spec()["containers"]}


def env_names_the_code_reads() -> set[str]:
    pattern = re.compile(
        r"(?:env(?:\.\w+)?|environ\.get|getenv|setdefault)\(\s*\"([A-Z][A-Z0-9_]*)\""
    )
    names: set[str] = set()
    for package in ("example_project", "qcluster", "qprint"):
        for path in (REPO_ROOT / package).rglob("*.py"):
            if "agent" not in path.parts:
                names.update(pattern.findall(path.read_text()))
    return names


def test_env_names_in_the_manifests_are_read_by_the_code():
    read = env_names_the_code_reads()
    assert {"DATABASE_URL", "REDIS_URL", "SECRET_KEY", "QQQ_NODE_ID"} <= read
    config = manifests()["ConfigMap"]["data"]
    secret = yaml.safe_load((K8S / "secret.example.yaml").read_text())["stringData"]
    given = set(config) | set(secret)
    for container in containers().values():
        given |= {e["name"] for e in container.get("env", [])}
    unknown = sorted(given - read)
    assert not unknown, f"the manifests set {unknown}, which nothing reads"
    assert {"DATABASE_URL", "REDIS_URL", "SECRET_KEY"} <= set(secret)


def test_both_containers_share_the_node_identity_and_the_settings():
    web, runtime = containers()["web"], containers()["cluster-runtime"]
    assert web["env"] == runtime["env"]
    downward = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in web["env"]}
    assert downward["QQQ_NODE_ID"] == "metadata.name"
    assert downward["QQQ_K8S_NODE_NAME"] == "spec.nodeName"
    assert web["envFrom"] == runtime["envFrom"]
    assert runtime["command"][:3] == ["python", "manage.py", "cluster_runtime"]
    metrics_port = runtime["command"][runtime["command"].index("--metrics-port") + 1]
    assert runtime["ports"] == [{"name": "metrics", "containerPort": int(metrics_port)}]


def test_probes_hit_the_code_paths_and_the_port(client, db):
    web = containers()["web"]
    port = web["ports"][0]
    command = web["command"]
    assert command[command.index("--port") + 1] == str(port["containerPort"])
    for probe, ok in (("readinessProbe", {200, 503}), ("livenessProbe", {200, 503})):
        get = web[probe]["httpGet"]
        assert get["port"] == port["name"]
        assert client.get(get["path"]).status_code in ok, get["path"]
    assert web["readinessProbe"]["httpGet"]["path"] == "/qcluster/ready/"
    assert web["livenessProbe"]["httpGet"]["path"] == "/qcluster/health/"
    service = manifests()["Service"]
    assert service["spec"]["ports"][0]["targetPort"] == port["name"]
    assert client.get(service["metadata"]["annotations"]["prometheus.io/path"]).status_code == 200
    assert service["metadata"]["annotations"]["prometheus.io/port"] == str(port["containerPort"])


def test_selectors_match_the_pods():
    labels = manifests()["Deployment"]["spec"]["template"]["metadata"]["labels"]
    for selector in (
        manifests()["Service"]["spec"]["selector"],
        manifests()["PodDisruptionBudget"]["spec"]["selector"]["matchLabels"],
        manifests()["Deployment"]["spec"]["selector"]["matchLabels"],
    ):
        assert selector.items() <= labels.items()


def test_commands_exist_and_the_drain_fits_in_the_grace_period():
    from django.core.management import get_commands

    commands = get_commands()
    pre_stops = [c["lifecycle"]["preStop"]["exec"]["command"] for c in containers().values()]
    job = manifests()["Job"]["spec"]["template"]["spec"]["containers"][0]["command"]
    from django.core.management import load_command_class

    for command in [*pre_stops, job, containers()["cluster-runtime"]["command"]]:
        assert command[:2] == ["python", "manage.py"] and command[2] in commands, command
        # The command's own parser accepts the arguments (SystemExit on an unknown one).
        parser = load_command_class(commands[command[2]], command[2]).create_parser(*command[1:3])
        parser.parse_args(command[3:])
    assert all(p[2] == "cluster_drain" for p in pre_stops)
    wait = float(pre_stops[0][pre_stops[0].index("--wait") + 1])
    grace = float(manifests()["ConfigMap"]["data"]["QCLUSTER_DRAIN_GRACE_SECONDS"])
    assert grace < wait < pod_spec()["terminationGracePeriodSeconds"]


def dockerfile() -> dict[str, list[str]]:
    """Instruction -> its arguments (JSON-array forms parsed), of the Dockerfile."""
    text = re.sub(r"\\\n", " ", (K8S / "Dockerfile").read_text())
    out: dict[str, list[str]] = {}
    for line in text.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            instruction, _, rest = line.strip().partition(" ")
            rest = rest.strip()
            value = json.loads(rest) if rest.startswith("[") else rest.split()
            out.setdefault(instruction.upper(), []).extend(value)
    return out


def test_dockerfile_agrees_with_the_manifests():
    docker = dockerfile()
    web = containers()["web"]
    assert docker["CMD"] == web["command"]
    assert docker["EXPOSE"] == [str(web["ports"][0]["containerPort"])]
    settings_module = manifests()["ConfigMap"]["data"]["DJANGO_SETTINGS_MODULE"]
    assert f"DJANGO_SETTINGS_MODULE={settings_module}" in docker["ENV"]
    assert docker["USER"] == [str(pod_spec()["securityContext"]["runAsUser"])]
    images = {c["image"] for c in pod_spec()["containers"]}
    images.add(manifests()["Job"]["spec"]["template"]["spec"]["containers"][0]["image"])
    assert images == {kustomization()["images"][0]["name"]}
    # What the image copies exists, so the build has what it needs.
    for source in docker["COPY"][:-1]:
        if not source.startswith("./"):
            assert (REPO_ROOT / source).exists(), source


def test_docs_name_every_deploy_file():
    operations = (REPO_ROOT / "docs" / "OPERATIONS.md").read_text()
    for path in sorted(DEPLOY.rglob("*")):
        if path.is_file():
            assert str(Path(path).relative_to(REPO_ROOT / "docs")) in operations, path
