"""The Helm chart (deploy/helm/waitline) holds the pod's contract, read from the rendered objects.

Rendered with `helm template` (built by `make setup`) for each values file under the chart's
`ci/` folder: every object validates against the Kubernetes schemas (`kubernetes-validate`,
strict: no unknown field), and every custom resource against its CRD's (vendored in
`crd_schemas/`); the probes point at the port the pod is told to bind (their paths
answer on the pod's own server: tests/integration/test_deploy_pod.py); the grace period
outlasts the drain grace and the Kafka clients' close bound (both read from the code); every
variable the chart sets is one the program in that container reads (derived from the settings
classes and the CLI's options); every container runs `waitline <sub-command>` with flags that
sub-command has, as the images' user.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import json
import os
import re
import shutil
import subprocess
import tempfile
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import chart_schema
import jsonschema
import jsonschema.protocols
import kubernetes_validate
import opentelemetry.environment_variables
import opentelemetry.sdk.environment_variables
import pytest
import typer.main
import yaml
from chart_render import helm_binary

from dispatcher import tracing
from dispatcher.cli import SUBCOMMANDS, app
from dispatcher.console.exposure import Exposure, check_bind
from dispatcher.console.pod_status import dns_target
from dispatcher.console.sampler import WatchSettings
from dispatcher.console.settings import ENV_PREFIX as CONSOLE_ENV_PREFIX
from dispatcher.console.settings import ConsoleSettings, load_console_settings
from dispatcher.endpoints import BOOTSTRAP_ENV, DSN_ENV
from dispatcher.handlers.http_config import ENV_PREFIX as HTTP_ENV_PREFIX
from dispatcher.handlers.http_config import HttpHandlerConfig, load_http_config
from dispatcher.kafka.clients import CLOSE_TIMEOUT_S
from dispatcher.kafka.config import KafkaClientSettings
from dispatcher.paths import CACHE_DIR_ENV, STATE_DIR_ENV
from dispatcher.pod.engine import CLOSE_LEFT_S
from dispatcher.pod.settings import DispatchSettings, load_settings
from dispatcher.tracing import exporters_asked

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "waitline"
VALUES_FILES = sorted((CHART / "ci").glob("*-values.yaml"))
# The oldest and the newest Kubernetes the chart is checked against.
KUBERNETES_VERSIONS = ("1.29.0", "1.34.0")
# Custom resources: no schema ships with Kubernetes; their CRDs' schemas are vendored
# (tests/unit/crd_schemas/README.md says from where and which release).
CRD_SCHEMAS = Path(__file__).resolve().parent / "crd_schemas"
CUSTOM_KINDS = {"ServiceMonitor": "monitoring.coreos.com/v1", "ScaledObject": "keda.sh/v1alpha1",
                "TriggerAuthentication": "keda.sh/v1alpha1"}
SECRET_PLACEHOLDER = "from-a-secret"


def helm() -> str:
    return helm_binary()


def helm_template(*args: str, release: str = "wl") -> subprocess.CompletedProcess[str]:
    return subprocess.run([helm(), "template", release, str(CHART), *args], capture_output=True,
                          text=True, check=False, timeout=60)


@functools.cache
def rendered(values: Path, *sets: str) -> tuple[dict[str, Any], ...]:
    result = helm_template("-f", str(values), *(arg for s in sets for arg in ("--set", s)))
    assert result.returncode == 0, result.stderr
    return tuple(doc for doc in yaml.safe_load_all(result.stdout) if doc)


def objects(kind: str, values: Path, *sets: str) -> list[dict[str, Any]]:
    return [doc for doc in rendered(values, *sets) if doc["kind"] == kind]


def only(kind: str, values: Path, *sets: str, component: str | None = None) -> dict[str, Any]:
    found = [doc for doc in objects(kind, values, *sets) if component is None
             or doc["metadata"]["labels"]["app.kubernetes.io/component"] == component]
    assert len(found) == 1, f"{len(found)} {kind} objects of {component}"
    return found[0]


def pod_specs(values: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """(component, pod spec) of every workload the values file renders."""
    for doc in rendered(values):
        template = {"Deployment": lambda d: d["spec"]["template"],
                    "CronJob": lambda d: d["spec"]["jobTemplate"]["spec"]["template"]
                    }.get(doc["kind"])
        if template is not None:
            yield doc["metadata"]["labels"]["app.kubernetes.io/component"], template(doc)["spec"]


def dispatcher_container(values: Path, *sets: str) -> dict[str, Any]:
    spec = only("Deployment", values, *sets, component="dispatcher")["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    return dict(container)


def literal_env(container: dict[str, Any]) -> dict[str, str]:
    """The container's variables as the program sees them (a Secret's value: a placeholder)."""
    return {var["name"]: var.get("value", SECRET_PLACEHOLDER) for var in container["env"]}


def default_values() -> Path:
    return CHART / "ci" / "default-values.yaml"


def full_values() -> Path:
    return CHART / "ci" / "full-values.yaml"


def secured_values() -> Path:
    return CHART / "ci" / "secured-values.yaml"


def test_the_ci_values_files_exist() -> None:
    assert {p.name for p in VALUES_FILES} >= {"default-values.yaml", "full-values.yaml",
                                              "secured-values.yaml", "standalone-values.yaml"}


@pytest.mark.parametrize("values", VALUES_FILES, ids=lambda p: p.name)
def test_helm_lint_passes(values: Path) -> None:
    result = subprocess.run([helm(), "lint", "--strict", str(CHART), "-f", str(values)],
                            capture_output=True, text=True, check=False, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("values", VALUES_FILES, ids=lambda p: p.name)
def test_every_rendered_object_validates_against_the_kubernetes_schemas(values: Path,
                                                                         version: str) -> None:
    docs = rendered(values)
    assert docs
    for doc in docs:
        if doc["kind"] in CUSTOM_KINDS:
            continue
        kubernetes_validate.validate(doc, version, strict=True)


def closed(schema: Any) -> Any:
    """A CRD schema as strict as kubernetes-validate's strict mode: an object with properties
    takes no other field, unless the CRD keeps unknown fields there (the API server would
    prune or refuse them)."""
    if isinstance(schema, list):
        return [closed(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {key: closed(value) for key, value in schema.items()}
    if ("properties" in out and "additionalProperties" not in out
            and not out.get("x-kubernetes-preserve-unknown-fields")):
        out["additionalProperties"] = False
    return out


@functools.cache
def crd_validator(kind: str) -> jsonschema.protocols.Validator:
    (path,) = CRD_SCHEMAS.glob(f"*_{kind}.json")
    vendored = json.loads(path.read_text())
    assert vendored["apiVersion"] == CUSTOM_KINDS[kind]
    schema = closed(vendored["openAPIV3Schema"])
    validator: jsonschema.protocols.Validator = jsonschema.Draft7Validator(schema)
    return validator


@pytest.mark.parametrize("values", VALUES_FILES, ids=lambda p: p.name)
def test_every_custom_resource_validates_against_its_crds_schema(values: Path) -> None:
    """KEDA's ScaledObject and TriggerAuthentication and the Prometheus operator's
    ServiceMonitor, against the OpenAPI schemas of their CRDs (vendored, closed as strictly as
    the built-in kinds are checked)."""
    checked = 0
    for doc in rendered(values):
        if doc["kind"] not in CUSTOM_KINDS:
            continue
        assert doc["apiVersion"] == CUSTOM_KINDS[doc["kind"]], doc["kind"]
        errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
                  for e in crd_validator(doc["kind"]).iter_errors(doc)]
        assert not errors, f"{doc['kind']} {doc['metadata']['name']}: {errors}"
        checked += 1
    if values == full_values():
        assert checked == 3  # the ServiceMonitor, the ScaledObject and its TriggerAuthentication


def test_the_crd_check_refuses_a_field_the_crd_does_not_have() -> None:
    scaled = dict(only("ScaledObject", full_values()))
    scaled["spec"] = {**scaled["spec"], "cooldownSeconds": 300}
    assert list(crd_validator("ScaledObject").iter_errors(scaled))


def test_the_ci_values_render_every_kind_the_chart_has() -> None:
    kinds = {doc["kind"] for values in VALUES_FILES for doc in rendered(values)}
    assert kinds == {"Deployment", "CronJob", "Service", "Secret", "ConfigMap",
                     "PodDisruptionBudget", "ServiceMonitor", "ScaledObject",
                     "TriggerAuthentication", "PersistentVolumeClaim", "ServiceAccount", "Role",
                     "RoleBinding", "Job", "Pod", "NetworkPolicy"}
    assert "PersistentVolumeClaim" in {doc["kind"] for doc in rendered(default_values())}


# --- the values schema, names, checksums ------------------------------------------------------


def test_the_schema_types_every_setting_as_the_code_does() -> None:
    """dispatcher.settings, dispatcher.http and console.settings in values.schema.json are
    derived from the settings classes (tests/unit/chart_schema.py): a setting the code gains,
    loses or retypes changes the schema too."""
    committed = chart_schema.committed_parts(json.loads(chart_schema.SCHEMA.read_text()))
    assert committed == chart_schema.derived_parts(), (
        "values.schema.json no longer matches the settings: run "
        "`.venv/bin/python tests/unit/chart_schema.py`")


@pytest.mark.parametrize(("typo", "where"), [
    ("dispatcher.settings.wait-expiry=2h", "'wait-expiry' not allowed"),
    ("dispatchr.replicas=2", "'dispatchr' not allowed"),
    ("kafka.sasl.mechanizm=PLAIN", "'mechanizm' not allowed"),
    ("dispatcher.http.retry-statuses=5xx", "'retry-statuses' not allowed"),
    ("dispatcher.http.bearer_token=in-clear", "'bearer_token' not allowed"),
    ("reconcile.longRunning.sparkmaster=spark://x:7077", "'sparkmaster' not allowed"),
    ("console.existingsecret=users", "'existingsecret' not allowed"),
], ids=lambda v: v.split("=")[0] if "=" in v else "")
def test_a_typo_in_the_values_is_refused(typo: str, where: str) -> None:
    """A key the chart does not know would otherwise be ignored: `settings.wait-expiry` would
    render WAITLINE_WAIT_EXPIRY, which nothing reads."""
    result = helm_template("-f", str(default_values()), "--set", typo)
    assert result.returncode != 0
    assert where in result.stderr


@pytest.mark.parametrize("wrong", [
    "dispatcher.settings.deadline=soon", "dispatcher.settings.concurrency=many",
    "dispatcher.settings.ordering=random", "kafka.securityProtocol=TLS",
    "kafka.sasl.mechanism=GSSAPI", "dispatcher.replicas=two", "reconcile.trigger=often",
    "tracing.samplerArg=2", "metrics.serviceMonitor.interval=soon",
])
def test_a_value_of_the_wrong_type_is_refused(wrong: str) -> None:
    result = helm_template("-f", str(default_values()), "--set", wrong)
    assert result.returncode != 0
    assert wrong.split("=", maxsplit=1)[0].replace(".", "/") in result.stderr


# Release names up to Helm's own limit (53 characters) must render names Kubernetes accepts.
LONG_RELEASE = "payments-eu-west-1-production-blue-green-canary-12345"
# The longest name each kind takes: a DNS label (63) for a Service (and a label value), 52 for a
# CronJob (its Jobs add 11 characters), 63 for a Job (its name becomes a label of its pods);
# every other kind a DNS subdomain (253).
NAME_LIMITS = {"Service": 63, "CronJob": 52, "Job": 63, "Pod": 63}
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")


def labels_of(doc: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """Every label of an object and of the pods it makes."""
    yield from doc["metadata"].get("labels", {}).items()
    spec = doc.get("spec", {})
    for template in (spec.get("template"), spec.get("jobTemplate", {}).get("spec", {}).get(
            "template")):
        if template:
            yield from template["metadata"].get("labels", {}).items()


@pytest.mark.parametrize("values", VALUES_FILES, ids=lambda p: p.name)
def test_a_long_release_name_renders_names_kubernetes_accepts(values: Path) -> None:
    assert len(LONG_RELEASE) == 53
    result = helm_template("-f", str(values), release=LONG_RELEASE)
    assert result.returncode == 0, result.stderr
    names: dict[str, set[str]] = {}
    for doc in (d for d in yaml.safe_load_all(result.stdout) if d):
        kind, name = doc["kind"], doc["metadata"]["name"]
        assert len(name) <= NAME_LIMITS.get(kind, 253), f"{kind} {name}: {len(name)} characters"
        assert DNS_SUBDOMAIN.match(name), f"{kind} {name}"
        assert name not in names.setdefault(kind, set()), f"two {kind} objects named {name}"
        names[kind].add(name)
        for key, value in labels_of(doc):
            assert len(str(value)) <= 63, f"{kind} {name}: label {key}={value}"
    short = {doc["metadata"]["name"] for doc in objects("Deployment", values)}
    long = names["Deployment"]
    assert len(short) == len(long), "every object is still there"


def test_two_long_release_names_never_share_an_object_name() -> None:
    def names(release: str) -> set[str]:
        result = helm_template("-f", str(default_values()), release=release)
        assert result.returncode == 0, result.stderr
        return {doc["metadata"]["name"] for doc in yaml.safe_load_all(result.stdout) if doc}

    assert not names(LONG_RELEASE) & names(LONG_RELEASE[:-1] + "6")


def referenced_config(spec: dict[str, Any]) -> set[str]:
    """The ConfigMaps and Secrets a pod spec reads (variables, whole sources, volumes)."""
    found = set()
    for container in spec["containers"]:
        for var in container.get("env", []):
            for kind in ("secretKeyRef", "configMapKeyRef"):
                if ref := var.get("valueFrom", {}).get(kind):
                    found.add(f"{kind}:{ref['name']}")
        for source in container.get("envFrom", []):
            found.update(f"{kind}:{ref['name']}" for kind, ref in source.items()
                         if kind in ("secretRef", "configMapRef"))
    for volume in spec.get("volumes", []):
        if "secret" in volume:
            found.add(f"secret:{volume['secret']['secretName']}")
        if "configMap" in volume:
            found.add(f"configMap:{volume['configMap']['name']}")
    return found


def pod_templates(values: Path, *sets: str) -> dict[str, dict[str, Any]]:
    """component -> pod template of every workload."""
    templates = {}
    for doc in rendered(values, *sets):
        if doc["kind"] == "Deployment":
            templates[doc["metadata"]["labels"]["app.kubernetes.io/component"]] = doc["spec"][
                "template"]
        elif doc["kind"] == "CronJob":
            templates[doc["metadata"]["labels"]["app.kubernetes.io/component"]] = doc["spec"][
                "jobTemplate"]["spec"]["template"]
    return templates


@pytest.mark.parametrize("values", VALUES_FILES, ids=lambda p: p.name)
def test_every_workload_that_reads_a_secret_or_config_map_carries_its_checksum(
        values: Path) -> None:
    for component, template in pod_templates(values).items():
        if referenced_config(template["spec"]):
            assert "checksum/config" in template["metadata"].get("annotations", {}), component


@pytest.mark.parametrize(("change", "rolled"), [
    ("kafka.sasl.password=rotated", {"dispatcher", "reconcile", "console"}),
    ("registry.existingSecret=another-registry", {"reconcile", "console"}),
    ("dispatcher.httpCredentials.bearerToken=rotated", {"dispatcher"}),
    ("dispatcher.handlerModules.myhandlers\\.py=async def handle(record): pass",
     {"dispatcher"}),
])
def test_a_changed_secret_or_config_map_rolls_the_pods_that_read_it(change: str,
                                                                    rolled: set[str]) -> None:
    def checksums(*sets: str) -> dict[str, str]:
        return {component: template["metadata"]["annotations"]["checksum/config"]
                for component, template in pod_templates(full_values(), *sets).items()}

    before, after = checksums(), checksums(change)
    assert {component for component in before if before[component] != after[component]} == rolled


# --- probes --------------------------------------------------------------------------------


@pytest.mark.parametrize("values", VALUES_FILES, ids=lambda p: p.name)
def test_probes_point_at_the_port_the_pod_binds(values: Path) -> None:
    container = dispatcher_container(values)
    settings = settings_from(literal_env(container))
    obs = settings.observability()
    (port,) = container["ports"]
    assert port["containerPort"] == obs.metrics_port
    assert obs.metrics_host == "0.0.0.0", "the probes reach the pod on its own address"
    probes = {name: container[name]["httpGet"] for name in
              ("startupProbe", "livenessProbe", "readinessProbe")}
    assert {probe["port"] for probe in probes.values()} == {port["name"]}
    assert probes["livenessProbe"]["path"] == probes["startupProbe"]["path"] == "/healthz"
    assert probes["readinessProbe"]["path"] == "/readyz"
    annotations = only("Deployment", values, component="dispatcher")["spec"]["template"][
        "metadata"]["annotations"]
    assert annotations["prometheus.io/port"] == str(obs.metrics_port)


def test_liveness_outlasts_the_clients_close() -> None:
    """A stopping pod closes its metrics server before its Kafka clients (each up to the close
    bound): liveness must not restart it meanwhile."""
    probe = dispatcher_container(default_values())["livenessProbe"]
    assert probe["periodSeconds"] * probe["failureThreshold"] > 2 * CLOSE_TIMEOUT_S


# --- shutdown ------------------------------------------------------------------------------


def termination_grace(values: Path, *sets: str) -> int:
    spec = only("Deployment", values, *sets, component="dispatcher")["spec"]["template"]["spec"]
    return int(spec["terminationGracePeriodSeconds"])


@pytest.mark.parametrize("sets", [(), ("dispatcher.drainGraceSeconds=300",)],
                         ids=["as given", "drain grace raised"])
@pytest.mark.parametrize("values", VALUES_FILES, ids=lambda p: p.name)
def test_the_grace_period_outlasts_the_drain_and_the_clients_close(values: Path,
                                                                    sets: tuple[str, ...]) -> None:
    drain_s = settings_from(literal_env(dispatcher_container(values, *sets))).drain_grace
    # The engine drains, then the consumer and the producer close, each within the bound.
    assert termination_grace(values, *sets) > drain_s + 2 * CLOSE_TIMEOUT_S


def test_the_charts_close_bound_is_the_codes() -> None:
    chart_values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert chart_values["dispatcher"]["closeBoundSeconds"] == CLOSE_TIMEOUT_S


@pytest.mark.parametrize("deadline", ["250ms", "30s", "2m", "10m", None],
                         ids=lambda d: d or "the pod's default")
def test_the_drain_follows_the_deadline(deadline: str | None) -> None:
    """A call in flight at a roll may run until its deadline: the drain grace the chart derives
    outlasts it, and the grace period outlasts the drain (with no deadline given, the pod's own
    default one, read from the code)."""
    sets = (f"dispatcher.settings.deadline={deadline or 'null'}",)
    settings = settings_from(literal_env(dispatcher_container(default_values(), *sets)))
    if deadline is None:
        assert settings.deadline == DispatchSettings.model_fields["deadline"].default
    assert settings.drain_grace >= settings.deadline
    assert termination_grace(default_values(), *sets) > (settings.drain_grace
                                                          + 2 * CLOSE_TIMEOUT_S)


def test_a_drain_shorter_than_the_deadline_is_refused() -> None:
    result = helm_template("-f", str(default_values()), "--set", "dispatcher.drainGraceSeconds=30",
                           "--set", "dispatcher.settings.deadline=2m")
    assert result.returncode != 0
    assert "dispatcher.drainGraceSeconds 30 is shorter than dispatcher.settings.deadline" in (
        result.stderr)
    assert "at least 120" in result.stderr
    bad = helm_template("-f", str(default_values()), "--set", "dispatcher.settings.deadline=soon")
    assert bad.returncode != 0
    assert "/dispatcher/settings/deadline" in bad.stderr


def test_the_drain_grace_is_set_only_through_its_own_value() -> None:
    result = helm_template("-f", str(default_values()), "--set",
                           "dispatcher.settings.drain-grace=600s")
    assert result.returncode != 0
    assert "dispatcher.drainGraceSeconds" in result.stderr


# --- environment ---------------------------------------------------------------------------


def settings_env(cls: type[Any], prefix: str) -> set[str]:
    return {f"{prefix}{name.upper()}" for name in cls.model_fields}


def command(name: str) -> Any:
    """The click command behind `waitline <name>` (imported as the CLI imports it)."""
    group: Any = typer.main.get_command(app)
    found = group.get_command(None, name)
    assert found is not None, f"waitline {name} is not a command"
    return found


def cli_env(name: str) -> set[str]:
    """The variables a sub-command's options declare (typer's envvar=...)."""
    names: set[str] = set()
    for param in command(name).params:
        envvar = getattr(param, "envvar", None)
        names.update([envvar] if isinstance(envvar, str) else envvar or [])
    return names


def otel_env() -> set[str]:
    """The standard OTEL_* variables: the names OpenTelemetry's API and SDK define."""
    return {name for module in (opentelemetry.environment_variables,
                                opentelemetry.sdk.environment_variables)
            for name in vars(module) if name.startswith("OTEL_")}


def program_reads(component: str) -> set[str]:
    """What the program in each component's container reads from its environment, from code."""
    common = {STATE_DIR_ENV, CACHE_DIR_ENV}
    if component == "dispatcher":
        return (common | settings_env(DispatchSettings, "WAITLINE_") | cli_env("dispatch")
                | settings_env(HttpHandlerConfig, HTTP_ENV_PREFIX) | otel_env())
    if component == "reconcile":
        return common | cli_env("reconcile") | settings_env(KafkaClientSettings, "WAITLINE_") | {
            BOOTSTRAP_ENV, DSN_ENV}
    if component == "console":
        return (common | settings_env(KafkaClientSettings, "WAITLINE_") | {DSN_ENV}
                | settings_env(ConsoleSettings, CONSOLE_ENV_PREFIX)
                | settings_env(WatchSettings, CONSOLE_ENV_PREFIX) | cli_env("console")
                | otel_env())
    raise AssertionError(f"unknown component {component}")


# Variables for the interpreter and the JVM themselves, each with what makes it read.
RUNTIME_ENV = {
    "PYTHONPATH": "the Python interpreter (the handler modules' folder)",
    "PYSPARK_SUBMIT_ARGS": "pyspark.java_gateway, which passes it to spark-submit",
    "SPARK_CONF_DIR": "spark-submit, which reads spark-defaults.conf there",
}


def test_the_runtime_variables_are_read_by_what_they_name() -> None:
    import pyspark.java_gateway

    source = Path(str(pyspark.java_gateway.__file__)).read_text()
    assert 'os.environ.get("PYSPARK_SUBMIT_ARGS"' in source
    spark_env = Path(str(pyspark.__file__)).parent / "bin" / "load-spark-env.sh"
    assert 'SPARK_CONF_DIR="${SPARK_CONF_DIR:-' in spark_env.read_text()
    out = subprocess.run(["python3", "-c", "import sys; print(sys.path)"], check=True,
                         capture_output=True, text=True, env={"PYTHONPATH": "/opt/x"}).stdout
    assert "/opt/x" in out


@pytest.mark.parametrize("values", VALUES_FILES, ids=lambda p: p.name)
def test_every_variable_the_chart_sets_is_one_the_program_reads(values: Path) -> None:
    checked = 0
    given = yaml.safe_load(values.read_text()) or {}
    for component, spec in pod_specs(values):
        # The user's own variables (extraEnv) are theirs to choose.
        users = {var["name"] for var in given.get(component, {}).get("extraEnv", [])}
        for container in spec["containers"]:
            reads = program_reads(component) | set(RUNTIME_ENV) | users
            # A variable only substituted into the arguments or another variable ($(NAME)).
            used = yaml.safe_dump([container.get("args", []),
                                   [v.get("value", "") for v in container["env"]]])
            for var in container["env"]:
                name = var["name"]
                assert name in reads or f"$({name})" in used, (
                    f"{component}: {name} is set but nothing in the container reads it")
                checked += 1
    assert checked > 10


@pytest.mark.parametrize("values", VALUES_FILES, ids=lambda p: p.name)
def test_the_pods_environment_is_a_valid_configuration(values: Path) -> None:
    env = literal_env(dispatcher_container(values))
    settings = settings_from(env)
    assert settings.input_topics()
    assert exporters_asked(env) == (["otlp"] if "OTEL_EXPORTER_OTLP_ENDPOINT" in env else [])
    if settings.handler == "dispatcher.handlers.http:handler":
        # The credentials are optional keys of a Secret: the one the values give, here.
        in_clear = {k: v for k, v in env.items() if v != SECRET_PLACEHOLDER}
        with environment(in_clear):
            assert load_http_config(bearer_token="t").url.startswith("https://")


@contextlib.contextmanager
def environment(env: dict[str, str]) -> Iterator[None]:
    """Only `env`'s WAITLINE_* variables, as in the container."""
    with pytest.MonkeyPatch.context() as patch:
        for name in [n for n in os.environ if n.startswith("WAITLINE_")]:
            patch.delenv(name)
        for name, value in env.items():
            patch.setenv(name, value)
        yield


def settings_from(env: dict[str, str]) -> DispatchSettings:
    """The pod's settings from the container's variables alone (the environment it runs in);
    a mounted certificate or key is a real PEM file here, as the settings read and check it."""
    with (tempfile.TemporaryDirectory() as root,
          environment({**env, **stand_in_pem_files(env, Path(root))})):
        return load_settings()


def stand_in_pem_files(env: dict[str, str], root: Path) -> dict[str, str]:
    """For each of the CA, certificate and key variables in `env`, a file under `root` with a
    real certificate (a CA too) or its key."""
    pem_vars = ("WAITLINE_SSL_CAFILE", "WAITLINE_SSL_CERTFILE", "WAITLINE_SSL_KEYFILE")
    if not any(name in env for name in pem_vars):
        return {}
    cert, key = certificate_and_key()
    files = {}
    for name in pem_vars:
        if name in env:
            path = root / name.lower()
            path.write_bytes(key if name.endswith("KEYFILE") else cert)
            files[name] = str(path)
    return files


def test_settings_the_chart_owns_are_refused_in_settings() -> None:
    for name in ("metrics-port", "counterparty-url", "bootstrap-servers"):
        result = helm_template("-f", str(default_values()), "--set",
                               f"dispatcher.settings.{name}=x")
        assert result.returncode != 0, name


def test_the_http_handlers_credentials_come_from_a_secret() -> None:
    env = {var["name"]: var for var in dispatcher_container(full_values())["env"]}
    secrets = {doc["metadata"]["name"]: doc for doc in objects("Secret", full_values())}
    for name in ("WAITLINE_HTTP_BEARER_TOKEN", "WAITLINE_SASL_PASSWORD"):
        assert "value" not in env[name], f"{name} in clear in the pod spec"
        assert env[name]["valueFrom"]["secretKeyRef"]["name"] in secrets
    token = env["WAITLINE_HTTP_BEARER_TOKEN"]["valueFrom"]["secretKeyRef"]
    assert secrets[token["name"]]["stringData"][token["key"]] == "token-from-values"
    assert "WAITLINE_HTTP_BASIC_PASSWORD" not in env, "only the credentials the values give"


@pytest.mark.parametrize("values", VALUES_FILES, ids=lambda p: p.name)
def test_no_secret_the_configuration_names_is_optional(values: Path) -> None:
    """A wrong key name must stop the pod at start (CreateContainerConfigError), not run it
    without its credential: every 401 would send a record to the DLQ."""
    for component, spec in pod_specs(values):
        for container in spec["containers"]:
            for var in container["env"]:
                ref = var.get("valueFrom", {}).get("secretKeyRef")
                assert ref is None or not ref.get("optional"), (component, var["name"])
        for volume in spec.get("volumes", []):
            assert not volume.get("secret", {}).get("optional"), (component, volume["name"])


def test_a_secret_of_the_users_is_read_under_the_keys_named() -> None:
    env = {var["name"]: var for var in dispatcher_container(secured_values())["env"]}
    token = env["WAITLINE_HTTP_BEARER_TOKEN"]["valueFrom"]["secretKeyRef"]
    assert (token["name"], token["key"]) == ("payments-api", "token")
    unnamed = helm_template("-f", str(secured_values()), "--set",
                            "dispatcher.httpCredentials.bearerTokenKey=")
    assert unnamed.returncode != 0
    assert "name the key that holds the credential" in unnamed.stderr


def test_the_http_values_configure_the_counterparty_url_preset_too() -> None:
    """`--counterparty-url` is a preset of the built-in HTTP handler: its headers come from
    `dispatcher.http` like the handler's (the chart refused them without `dispatcher.handler`)."""
    env = literal_env(dispatcher_container(
        default_values(), "dispatcher.counterpartyUrl=https://api.example.com/pay",
        "dispatcher.http.content_type=application/x-ndjson"))
    settings = settings_from(env)
    with environment(env):
        preset = settings.counterparty()
    assert (preset.url, preset.content_type) == ("https://api.example.com/pay",
                                                 "application/x-ndjson")


def test_handler_modules_are_mounted_on_the_python_path() -> None:
    container = dispatcher_container(full_values())
    (config_map,) = objects("ConfigMap", full_values())
    mount = next(m for m in container["volumeMounts"] if m["name"] == "handler-modules")
    assert literal_env(container)["PYTHONPATH"] == mount["mountPath"]
    assert "myhandlers.py" in config_map["data"]


# --- Kafka: one configuration for every container and for KEDA ------------------------------

# How the chart sets each field of KafkaClientSettings, the one Kafka configuration the pod, the
# reconciliation job and the console read: a value, or why the chart leaves it to the program.
# A field added to the settings fails the first test below until it is placed here.
KAFKA_SETTINGS_FROM_VALUES = {
    "bootstrap_servers": "kafka.bootstrapServers",
    "security_protocol": "kafka.securityProtocol",
    "sasl_mechanism": "kafka.sasl.mechanism",
    "sasl_username": "kafka.sasl.username",
    "sasl_password": "kafka.sasl.existingSecret + passwordKey: a secretKeyRef",
    "ssl_cafile": "kafka.tls.ca: a file of the Secret, mounted",
    "ssl_certfile": "kafka.tls.client.certKey: a file of the Secret, mounted",
    "ssl_keyfile": "kafka.tls.client.keyKey: a file of the Secret, mounted",
    "ssl_key_password": "kafka.tls.client.keyPasswordKey: a secretKeyRef, only when set",
    "ssl_check_hostname": "kafka.tls.checkHostname: rendered only when false",
}
KAFKA_SETTINGS_LEFT_TO_THE_PROGRAM = {
    "client_id": "each command names its own clients (waitline, waitline-dlq, ...)",
    "metadata_max_age": "a `waitline dispatch` flag: dispatcher.settings.metadata-max-age",
    "ssl_ca_pem": "the chart mounts the CA as a file (kafka.tls.ca): WAITLINE_SSL_CAFILE",
}
# The optional ones, rendered only when their value is set (those the CI values files leave out).
KAFKA_SETTINGS_WHEN_SET = {"ssl_key_password", "ssl_check_hostname"}


def test_the_chart_places_every_kafka_setting() -> None:
    fields = set(KafkaClientSettings.model_fields)
    placed = set(KAFKA_SETTINGS_FROM_VALUES) | set(KAFKA_SETTINGS_LEFT_TO_THE_PROGRAM)
    assert fields <= placed, (
        f"KafkaClientSettings has {sorted(fields - placed)} the chart does not set: give each "
        "a kafka.* value (deploy/helm/waitline) or say why not")
    assert placed <= fields, (
        f"the chart places {sorted(placed - fields)}, which KafkaClientSettings does not have")


def kafka_env(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The container's variables that KafkaClientSettings reads, as rendered."""
    names = settings_env(KafkaClientSettings, "WAITLINE_")
    return {var["name"]: var for var in container["env"] if var["name"] in names}


def workload_containers(values: Path) -> Iterator[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(component, pod spec, container) of every workload's container."""
    for component, spec in pod_specs(values):
        for container in spec["containers"]:
            yield component, spec, container


@pytest.mark.parametrize("values", VALUES_FILES, ids=lambda p: p.name)
def test_every_container_reaches_kafka_with_the_same_settings(values: Path) -> None:
    envs = {component: kafka_env(container)
            for component, _spec, container in workload_containers(values)}
    assert {"dispatcher", "reconcile"} <= envs.keys()
    dispatcher = envs["dispatcher"]
    for component, env in envs.items():
        assert env == dispatcher, f"{component} reaches Kafka otherwise than the pod"
    if values == secured_values():
        assert set(dispatcher) == {f"WAITLINE_{name.upper()}"
                                   for name in set(KAFKA_SETTINGS_FROM_VALUES)
                                   - KAFKA_SETTINGS_WHEN_SET}


def test_an_encrypted_client_key_and_a_name_unchecked_reach_every_container_and_keda() -> None:
    """keyPasswordKey: WAITLINE_SSL_KEY_PASSWORD from the client certificate's Secret, in every
    container, and KEDA's keyPassword from the same key; checkHostname false:
    WAITLINE_SSL_CHECK_HOSTNAME=false in every container."""
    client = yaml.safe_load(secured_values().read_text())["kafka"]["tls"]["client"]
    result = helm_template("-f", str(secured_values()),
                           "--set", "kafka.tls.client.keyPasswordKey=user.password",
                           "--set", "kafka.tls.checkHostname=false")
    assert result.returncode == 0, result.stderr
    docs = [doc for doc in yaml.safe_load_all(result.stdout) if doc]
    containers = 0
    for doc in docs:
        if doc["kind"] not in ("Deployment", "CronJob"):
            continue
        template = (doc["spec"]["template"] if doc["kind"] == "Deployment"
                    else doc["spec"]["jobTemplate"]["spec"]["template"])
        for container in template["spec"]["containers"]:
            env = {var["name"]: var for var in container["env"]}
            assert env["WAITLINE_SSL_KEY_PASSWORD"]["valueFrom"]["secretKeyRef"] == {
                "name": client["existingSecret"], "key": "user.password"}
            assert env["WAITLINE_SSL_CHECK_HOSTNAME"]["value"] == "false"
            containers += 1
    assert containers >= 3
    (auth,) = [doc for doc in docs if doc["kind"] == "TriggerAuthentication"]
    refs = {ref["parameter"]: (ref["name"], ref["key"]) for ref in auth["spec"]["secretTargetRef"]}
    assert refs["keyPassword"] == (client["existingSecret"], "user.password")


def mounted_files(spec: dict[str, Any], container: dict[str, Any]) -> dict[str, tuple[str, str]]:
    """Path in the container -> (Secret, key) of every file a Secret volume puts there."""
    volumes = {volume["name"]: volume for volume in spec.get("volumes", [])}
    files: dict[str, tuple[str, str]] = {}
    for mount in container.get("volumeMounts", []):
        secret = volumes[mount["name"]].get("secret")
        if secret is None:
            continue
        for item in secret.get("items", []):
            files[f"{mount['mountPath']}/{item['path']}"] = (secret["secretName"], item["key"])
    return files


def local_env(spec: dict[str, Any], container: dict[str, Any], root: Path,
              contents: dict[tuple[str, str], bytes] | None = None) -> dict[str, str]:
    """The container's variables as its program would read them, here: each Secret's value a
    placeholder naming it ("secret:NAME/KEY"), each file of a mounted Secret a file under
    `root` holding `contents[(Secret, key)]`, else the name of the Secret and key."""
    files = mounted_files(spec, container)
    env: dict[str, str] = {}
    for var in container["env"]:
        ref = var.get("valueFrom", {}).get("secretKeyRef")
        if ref is not None:
            env[var["name"]] = f"secret:{ref['name']}/{ref['key']}"
        elif var.get("value") in files:
            local = root / var["value"].lstrip("/")
            local.parent.mkdir(parents=True, exist_ok=True)
            source = files[var["value"]]
            local.write_bytes((contents or {}).get(source, "/".join(source).encode()))
            env[var["name"]] = str(local)
        elif "value" in var:
            env[var["name"]] = var["value"]
    return env


def container_kafka_settings(spec: dict[str, Any], container: dict[str, Any], root: Path,
                             contents: dict[tuple[str, str], bytes]) -> KafkaClientSettings:
    """KafkaClientSettings as the program in `container` would read them (`local_env`)."""
    env = local_env(spec, container, root, contents)
    with environment({name: value for name, value in env.items()
                      if name in kafka_env(container)}):
        return KafkaClientSettings()


def certificate_and_key() -> tuple[bytes, bytes]:
    """A self-signed certificate (a CA too) and its key, PEM: files the Kafka settings can
    read and check as a CA, a client certificate and its key."""
    import datetime as dt

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "waitline-chart-test")])
    now = dt.datetime.now(dt.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    return (cert.public_bytes(serialization.Encoding.PEM),
            key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                              serialization.NoEncryption()))


def test_the_secured_values_connect_every_container_with_tls_and_sasl(tmp_path: Path) -> None:
    """From the rendered manifests and the settings class: every container's Kafka clients
    speak SASL_SSL as the user the values name, with the password, CA and client certificate
    of the Secrets they name."""
    kafka = yaml.safe_load(secured_values().read_text())["kafka"]
    sasl, tls = kafka["sasl"], kafka["tls"]
    # Real PEM in each mounted file: the settings check what they read (the CA parses, the
    # key is the certificate's), and each file is known by its content.
    cert, key = certificate_and_key()
    ca = (tls["ca"]["existingSecret"], tls["ca"]["key"])
    client_cert = (tls["client"]["existingSecret"], tls["client"]["certKey"])
    client_key = (tls["client"]["existingSecret"], tls["client"]["keyKey"])
    contents = {ca: cert + b"\n# the CA\n", client_cert: cert, client_key: key}
    components = set()
    for component, spec, container in workload_containers(secured_values()):
        settings = container_kafka_settings(spec, container, tmp_path / component, contents)
        assert settings.security_protocol == "SASL_SSL"
        assert (settings.sasl_mechanism, settings.sasl_username) == (sasl["mechanism"],
                                                                     sasl["username"])
        assert settings.sasl_password is not None
        assert settings.sasl_password.get_secret_value() == (
            f"secret:{sasl['existingSecret']}/{sasl['passwordKey']}")
        read = {name: Path(str(getattr(settings, name))).read_bytes()
                for name in ("ssl_cafile", "ssl_certfile", "ssl_keyfile")}
        assert read == {"ssl_cafile": contents[ca], "ssl_certfile": contents[client_cert],
                        "ssl_keyfile": contents[client_key]}
        components.add(component)
    assert components == {"dispatcher", "reconcile", "console"}


def test_keda_reads_the_lag_with_the_pods_credentials() -> None:
    """The TriggerAuthentication takes the user from the pod's own variable and the password,
    CA and client certificate from the Secrets and keys the pod reads them from."""
    spec = only("Deployment", secured_values(), component="dispatcher")["spec"]["template"][
        "spec"]
    (container,) = spec["containers"]
    env = kafka_env(container)
    files = mounted_files(spec, container)
    trigger = only("ScaledObject", secured_values())["spec"]["triggers"][0]
    auth = only("TriggerAuthentication", secured_values())
    assert trigger["authenticationRef"]["name"] == auth["metadata"]["name"]
    assert trigger["metadata"]["sasl"] == "scram_sha512"
    assert trigger["metadata"]["tls"] == "enable"
    (username,) = auth["spec"]["env"]
    assert (username["parameter"], username["containerName"]) == ("username", container["name"])
    assert username["name"] == "WAITLINE_SASL_USERNAME" and username["name"] in env
    refs = {ref["parameter"]: (ref["name"], ref["key"]) for ref in auth["spec"]["secretTargetRef"]}
    password = env["WAITLINE_SASL_PASSWORD"]["valueFrom"]["secretKeyRef"]
    assert refs == {"password": (password["name"], password["key"]),
                    "ca": files[env["WAITLINE_SSL_CAFILE"]["value"]],
                    "cert": files[env["WAITLINE_SSL_CERTFILE"]["value"]],
                    "key": files[env["WAITLINE_SSL_KEYFILE"]["value"]]}


@pytest.mark.parametrize(("sets", "message"), [
    (("kafka.securityProtocol=SSL",), "kafka.sasl.* is set but kafka.securityProtocol SSL"),
    (("kafka.securityProtocol=SASL_PLAINTEXT",), "kafka.tls.* is set but"),
    (("kafka.sasl.mechanism=",), "kafka.sasl.mechanism is required"),
    (("kafka.tls.client.keyKey=",), "a client certificate needs both"),
    (("kafka.tls.client.existingSecret=", "kafka.tls.client.keyPasswordKey=user.password"),
     "kafka.tls.client.keyPasswordKey is set but there is no client key"),
    (("kafka.securityProtocol=SASL_PLAINTEXT", "kafka.tls.ca.existingSecret=",
      "kafka.tls.client.existingSecret=", "kafka.tls.checkHostname=false"),
     "kafka.tls.* is set but"),
])
def test_kafka_values_that_contradict_each_other_are_refused(sets: tuple[str, ...],
                                                             message: str) -> None:
    result = helm_template("-f", str(secured_values()),
                           *(arg for s in sets for arg in ("--set", s)))
    assert result.returncode != 0
    assert message in result.stderr


@pytest.mark.parametrize("values", VALUES_FILES, ids=lambda p: p.name)
def test_every_workload_takes_the_users_variables_and_volumes(values: Path,
                                                              tmp_path: Path) -> None:
    """extraEnv, envFrom, extraVolumes and extraVolumeMounts reach each workload's container."""
    extras: dict[str, list[dict[str, Any]]] = {"extraEnv": [{"name": "EXTRA_ONE", "value": "one"}],
              "envFrom": [{"secretRef": {"name": "extra-secret"}}],
              "extraVolumes": [{"name": "extra", "emptyDir": {"medium": "Memory"}}],
              "extraVolumeMounts": [{"name": "extra", "mountPath": "/opt/extra"}]}
    more = tmp_path / "extras.yaml"
    more.write_text(yaml.safe_dump(dict.fromkeys(("dispatcher", "reconcile", "console"),
                                                  extras)))
    result = helm_template("-f", str(values), "-f", str(more))
    assert result.returncode == 0, result.stderr
    seen = set()
    for doc in yaml.safe_load_all(result.stdout):
        if not doc or doc["kind"] not in ("Deployment", "CronJob"):
            continue
        template = (doc["spec"]["template"] if doc["kind"] == "Deployment"
                    else doc["spec"]["jobTemplate"]["spec"]["template"])
        spec = template["spec"]
        (container,) = spec["containers"]
        assert extras["extraEnv"][0] in container["env"]
        assert container["envFrom"] == extras["envFrom"]
        assert extras["extraVolumes"][0] in spec["volumes"]
        assert extras["extraVolumeMounts"][0] in container["volumeMounts"]
        seen.add(doc["metadata"]["labels"]["app.kubernetes.io/component"])
    assert seen >= {"dispatcher", "reconcile"}


def test_a_variable_the_chart_sets_is_refused_in_extra_env() -> None:
    result = helm_template("-f", str(default_values()), "--set",
                           "dispatcher.extraEnv[0].name=WAITLINE_BOOTSTRAP_SERVERS",
                           "--set", "dispatcher.extraEnv[0].value=elsewhere:9092")
    assert result.returncode != 0
    assert "dispatcher.extraEnv: WAITLINE_BOOTSTRAP_SERVERS is set by the chart" in result.stderr


def test_the_console_traces_with_the_pods_settings() -> None:
    """The console's redrives make spans (a PRODUCER span per replayed record): it gets the
    same OTEL_* variables as the pod."""
    otel = {name: value for name, value in literal_env(dispatcher_container(full_values())).items()
            if name.startswith("OTEL_")}
    assert "OTEL_EXPORTER_OTLP_ENDPOINT" in otel
    console = only("Deployment", full_values(), component="console")["spec"]["template"]["spec"]
    console_env = literal_env(console["containers"][0])
    assert {name: console_env.get(name) for name in otel} == otel
    assert exporters_asked(console_env) == ["otlp"]


def test_the_pods_exit_flush_of_spans_fits_in_its_shutdown_margin() -> None:
    """After the drain's grace the pod has shutdownMarginSeconds to close the wait records of
    the holes it left (engine.CLOSE_LEFT_S), commit and exit; the spans it still holds get
    tracing.EXIT_FLUSH_S of it, however slow the collector."""
    given = yaml.safe_load((CHART / "values.yaml").read_text())
    assert given["dispatcher"]["shutdownMarginSeconds"] > tracing.EXIT_FLUSH_S + CLOSE_LEFT_S
    assert given["tracing"]["sampler"].endswith("traceidratio"), "a ratio by default"
    assert 0 < float(given["tracing"]["samplerArg"]) < 1


def console_values() -> list[Path]:
    return [values for values in VALUES_FILES
            if (yaml.safe_load(values.read_text()).get("console") or {}).get("enabled")]


@pytest.mark.parametrize("values", console_values(), ids=lambda p: p.name)
def test_the_console_starts_with_what_the_chart_gives_it(values: Path, tmp_path: Path) -> None:
    """The console beyond loopback serves HTTPS itself or behind a trusted proxy, or refuses to
    start (dispatcher/console/exposure.py): the settings the chart renders pass that check, and
    a request through the console's Service, or to the names the values list, is answered."""
    spec = only("Deployment", values, component="console")["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    args = [str(a) for a in container["args"]]
    env = local_env(spec, container, tmp_path)
    # The users' Secret holds JSON (README, "Console"): one operator here.
    assert env["WAITLINE_CONSOLE_CREDENTIALS"].startswith("secret:")
    env["WAITLINE_CONSOLE_CREDENTIALS"] = json.dumps(
        {"alice": {"role": "operator", "password": "correct-horse-battery-9"}})
    with environment(env):
        settings = load_console_settings(host=args[args.index("--host") + 1])
    check_bind(settings.host, tls=settings.tls, proxied=bool(settings.trusted_proxies),
               insecure_http=settings.insecure_http)
    assert not settings.insecure_http
    exposure = Exposure.of(settings.host, settings.trusted_proxies, settings.allowed_hosts)
    service = only("Service", values, component="console")["metadata"]["name"]
    given = yaml.safe_load(values.read_text())["console"]
    for host in (service, f"{service}.default.svc", *given.get("allowedHosts", [])):
        assert exposure.host_allowed(f"{host}:80"), host
    assert not exposure.host_allowed("attacker.example.net")


def test_a_console_with_neither_tls_nor_a_proxy_is_refused() -> None:
    result = helm_template("-f", str(default_values()), "--set", "console.enabled=true",
                           "--set", "console.existingSecret=users")
    assert result.returncode != 0
    assert "console.tls.existingSecret" in result.stderr
    assert "console.insecureHttp" in result.stderr
    insecure = helm_template("-f", str(default_values()), "--set", "console.enabled=true",
                             "--set", "console.existingSecret=users",
                             "--set", "console.insecureHttp=true")
    assert insecure.returncode == 0, insecure.stderr


# --- commands and the image ----------------------------------------------------------------


def dockerfile_user(path: Path) -> str:
    return re.findall(r"^USER\s+(\S+)", path.read_text(), re.MULTILINE)[-1]


def dockerfile_env(path: Path) -> dict[str, str]:
    """The ENV NAME=VALUE pairs of a Dockerfile (its last stage's are the image's)."""
    return dict(re.findall(r"^ENV\s+(\w+)=(\S+)", path.read_text(), re.MULTILINE))


@pytest.mark.parametrize("values", VALUES_FILES, ids=lambda p: p.name)
def test_every_container_runs_a_waitline_command_with_its_flags(values: Path) -> None:
    for component, spec in pod_specs(values):
        for container in spec["containers"]:
            assert "command" not in container, "the image's entry point (waitline) must run"
            args = [str(a) for a in container["args"]]
            assert args[0] in SUBCOMMANDS, args[0]
            known = {opt for p in command(args[0]).params for opt in getattr(p, "opts", [])}
            for flag in (a for a in args[1:] if a.startswith("--")):
                assert flag in known, f"{component}: waitline {args[0]} has no {flag}"


def test_the_images_entry_point_is_waitline() -> None:
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "scripts"]
    assert scripts["waitline"] == "dispatcher.cli:main"
    for dockerfile in ("Dockerfile", "Dockerfile.reconcile"):
        text = (ROOT / "compose" / dockerfile).read_text()
        assert re.findall(r"^ENTRYPOINT\s+(.+)$", text, re.MULTILINE)[-1] == '["waitline"]'


@pytest.mark.parametrize("values", VALUES_FILES, ids=lambda p: p.name)
def test_every_pod_runs_as_the_images_non_root_user(values: Path) -> None:
    users = {dockerfile_user(ROOT / "compose" / f) for f in ("Dockerfile", "Dockerfile.reconcile")}
    assert len(users) == 1
    (uid,) = users
    assert uid.isdigit() and int(uid) > 0
    for component, spec in pod_specs(values):
        security = spec["securityContext"]
        assert security["runAsNonRoot"] is True, component
        assert security["runAsUser"] == int(uid), component
        for container in spec["containers"]:
            assert container["securityContext"]["allowPrivilegeEscalation"] is False


def test_the_console_binds_beyond_loopback_behind_its_service() -> None:
    container = only("Deployment", full_values(), component="console")["spec"]["template"][
        "spec"]["containers"][0]
    args = [str(a) for a in container["args"]]
    assert args[args.index("--host") + 1] == "0.0.0.0"
    assert int(args[args.index("--port") + 1]) == container["ports"][0]["containerPort"]
    credentials = next(v for v in container["env"] if v["name"] == "WAITLINE_CONSOLE_CREDENTIALS")
    assert credentials["valueFrom"]["secretKeyRef"]["key"] == "credentials"
    service = only("Service", full_values(), component="console")
    assert service["spec"]["ports"][0]["targetPort"] == container["ports"][0]["name"]


# --- upgrades: the registry's schema first; helm test --------------------------------------------


def hook_objects(values: Path, kind: str) -> list[dict[str, Any]]:
    return [doc for doc in objects(kind, values)
            if "helm.sh/hook" in doc["metadata"].get("annotations", {})]


@pytest.mark.parametrize("values", [default_values(), secured_values()], ids=lambda p: p.name)
def test_the_registry_is_migrated_before_the_release_starts_or_changes(values: Path) -> None:
    (job,) = hook_objects(values, "Job")
    annotations = job["metadata"]["annotations"]
    assert annotations["helm.sh/hook"] == "pre-install,pre-upgrade"
    spec = job["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    assert container["args"] == ["registry", "migrate"]
    registry: Any = command("registry")
    assert registry.get_command(None, "migrate") is not None, "waitline registry migrate"
    dsn = next(v for v in container["env"] if v["name"] == DSN_ENV)["valueFrom"]["secretKeyRef"]
    reconcile = only("Deployment", values, component="reconcile")["spec"]["template"]["spec"]
    job_dsn = next(v for v in reconcile["containers"][0]["env"] if v["name"] == DSN_ENV)[
        "valueFrom"]["secretKeyRef"]
    secrets = {doc["metadata"]["name"]: doc for doc in objects("Secret", values)}
    if dsn == job_dsn:  # a Secret of the user's: there before any install
        assert dsn["name"] not in secrets
    else:  # the chart's own: a copy of it made before the migration, as a hook too
        hook_secret = secrets[dsn["name"]]
        assert hook_secret["metadata"]["annotations"]["helm.sh/hook"] == annotations[
            "helm.sh/hook"]
        assert int(hook_secret["metadata"]["annotations"]["helm.sh/hook-weight"]) < int(
            annotations["helm.sh/hook-weight"])
        assert "hook-succeeded" in hook_secret["metadata"]["annotations"][
            "helm.sh/hook-delete-policy"]
        assert hook_secret["stringData"][dsn["key"]] == secrets[job_dsn["name"]]["stringData"][
            job_dsn["key"]]
    assert spec["serviceAccountName"] in {a["metadata"]["name"]
                                          for a in hook_objects(values, "ServiceAccount")}


def test_helm_test_checks_the_probes_of_the_pods_the_metrics_service_selects() -> None:
    (pod,) = objects("Pod", default_values())
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    (script,) = pod["spec"]["containers"][0]["args"]
    container = dispatcher_container(default_values())
    service = only("Service", default_values(), component="dispatcher")
    port = container["ports"][0]["containerPort"]
    assert f'"{service["metadata"]["name"]}.default.svc", {port}' in script
    for probe in ("livenessProbe", "readinessProbe"):
        assert f'"{container[probe]["httpGet"]["path"]}"' in script


def rendered_notes(values: Path, tmp_path: Path) -> str:
    """NOTES.txt as `helm install` prints it (rendered here through a copy of the chart, since
    `helm template` leaves the notes out)."""
    chart = tmp_path / "chart"
    shutil.copytree(CHART, chart)
    (chart / "notes.txt").write_text((CHART / "templates" / "NOTES.txt").read_text())
    (chart / "templates" / "notes-as-config-map.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: notes}\n"
        'data:\n  notes: {{ tpl (.Files.Get "notes.txt") . | quote }}\n')
    result = subprocess.run([helm(), "template", "wl", str(chart), "-f", str(values),
                             "--show-only", "templates/notes-as-config-map.yaml"],
                            capture_output=True, text=True, check=False, timeout=60)
    assert result.returncode == 0, result.stderr
    return str(yaml.safe_load(result.stdout)["data"]["notes"])


@pytest.mark.parametrize("values", VALUES_FILES, ids=lambda p: p.name)
def test_the_notes_say_how_to_watch_every_workload_roll_out(values: Path,
                                                           tmp_path: Path) -> None:
    notes = rendered_notes(values, tmp_path)
    for deployment in objects("Deployment", values):
        assert f"rollout status deployment/{deployment['metadata']['name']}" in notes
    for cron in objects("CronJob", values):
        assert f"cronjob/{cron['metadata']['name']}" in notes
    assert "helm test wl" in notes
    drain = settings_from(literal_env(dispatcher_container(values))).drain_grace
    assert f"drains for\n{drain:g} s" in notes


# --- identities, network, placement ------------------------------------------------------------


@pytest.mark.parametrize("values", VALUES_FILES, ids=lambda p: p.name)
def test_every_workload_runs_as_a_service_account_of_its_own(values: Path) -> None:
    accounts = {doc["metadata"]["name"]: doc for doc in objects("ServiceAccount", values)
                if "helm.sh/hook" not in doc["metadata"].get("annotations", {})}
    used: dict[str, str] = {}
    for component, spec in pod_specs(values):
        assert spec["serviceAccountName"] in accounts, component
        used[spec["serviceAccountName"]] = component
        # Only Spark's driver on Kubernetes calls the API server.
        token = spec["automountServiceAccountToken"]
        args = spec["containers"][0]["args"]
        on_kubernetes = component == "reconcile" and any(str(a).startswith("k8s://")
                                                          for a in args)
        assert token is on_kubernetes, component
    assert len(used) == len(set(used.values())), "one ServiceAccount per workload"
    for account in accounts.values():
        assert account["automountServiceAccountToken"] is False


def policies(values: Path) -> dict[str, dict[str, Any]]:
    return {doc["metadata"]["labels"]["app.kubernetes.io/component"]: doc["spec"]
            for doc in objects("NetworkPolicy", values)}


def egress_ports(policy: dict[str, Any]) -> set[int]:
    return {port["port"] for rule in policy["egress"] for port in rule["ports"]}


def test_network_policies_let_each_workload_reach_only_what_it_uses() -> None:
    """Opt-in: the pod reaches Kafka and the counterparty, the job and the console Kafka and
    PostgreSQL (the job's driver also the API server and its executors), and DNS; nothing
    else, and each policy selects its workload's pods."""
    given = yaml.safe_load((CHART / "values.yaml").read_text())["networkPolicy"]
    ports = {name: set(rule["ports"]) for name, rule in given.items() if name != "enabled"}
    found = policies(secured_values())
    assert found.keys() == {"dispatcher", "reconcile", "reconcile-executor", "console"}
    assert egress_ports(found["dispatcher"]) == ports["dns"] | ports["kafka"] | ports[
        "counterparty"]
    assert egress_ports(found["console"]) == ports["dns"] | ports["kafka"] | ports["postgres"]
    assert egress_ports(found["reconcile"]) == (ports["dns"] | ports["kafka"] | ports["postgres"]
                                                | ports["kubernetesApi"] | {7079})
    assert egress_ports(found["reconcile-executor"]) == (
        ports["dns"] | ports["kafka"] | ports["postgres"] | {7078, 7079})
    for component, template in pod_templates(secured_values()).items():
        selector = found[component]["podSelector"]["matchLabels"]
        assert selector.items() <= template["metadata"]["labels"].items(), component
        assert set(found[component]["policyTypes"]) == {"Ingress", "Egress"}
    (config_map,) = [c for c in objects("ConfigMap", secured_values())
                     if c["metadata"]["name"].endswith("spark-conf")]
    executor = yaml.safe_load(config_map["data"]["executor-pod.yaml"])
    assert found["reconcile-executor"]["podSelector"]["matchLabels"].items() <= executor[
        "metadata"]["labels"].items()
    assert not objects("NetworkPolicy", default_values()), "opt-in"


def test_a_broker_port_the_network_policy_leaves_out_is_refused() -> None:
    result = helm_template("-f", str(secured_values()), "--set", "networkPolicy.kafka.ports={9092}")
    assert result.returncode != 0
    assert "leaves out port 9093 of kafka.bootstrapServers" in result.stderr


def test_the_dispatcher_spreads_over_zones_and_nodes() -> None:
    deployment = only("Deployment", default_values(), component="dispatcher")
    template = deployment["spec"]["template"]
    constraints = template["spec"]["topologySpreadConstraints"]
    assert {c["topologyKey"] for c in constraints} == {"topology.kubernetes.io/zone",
                                                       "kubernetes.io/hostname"}
    for constraint in constraints:
        assert constraint["labelSelector"]["matchLabels"].items() <= template["metadata"][
            "labels"].items()
        assert constraint["whenUnsatisfiable"] == "ScheduleAnyway"


# --- the chart's README ------------------------------------------------------------------------


def test_the_readmes_secured_kafka_example_is_the_one_the_tests_render() -> None:
    readme = (CHART / "README.md").read_text()
    (block,) = re.findall(r"```yaml\n(kafka:.*?)```", readme, re.DOTALL)
    assert yaml.safe_load(block)["kafka"] == yaml.safe_load(secured_values().read_text())["kafka"]


def test_every_value_the_readme_names_is_a_value_of_the_chart() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    readme = (CHART / "README.md").read_text()
    named = set(re.findall(r"`((?:kafka|registry|dispatcher|autoscaling|reconcile|console|"
                           r"tracing|networkPolicy|image|reconcileImage)(?:\.[A-Za-z-]+)+)",
                           readme))
    assert len(named) > 10
    for path in named:
        node: Any = values
        for key in path.split("."):
            assert isinstance(node, dict) and key in node, f"README names {path}"
            node = node[key]


def test_the_console_finds_every_dispatcher_pod_through_the_headless_metrics_service() -> None:
    """The pods view asks each pod's /status at every address of the pods' metrics Service,
    which is headless and lists pods not ready too (a stalled pod is the one to see)."""
    container = only("Deployment", full_values(), component="console")["spec"]["template"][
        "spec"]["containers"][0]
    dns = next(v["value"] for v in container["env"]
               if v["name"] == "WAITLINE_CONSOLE_POD_STATUS_DNS")
    service = only("Service", full_values(), component="dispatcher")
    pod = dispatcher_container(full_values())
    port = next(p["containerPort"] for p in pod["ports"] if p["name"] == "metrics")
    assert dns == f"{service['metadata']['name']}.default.svc:{port}"
    assert dns_target(dns) == (f"{service['metadata']['name']}.default.svc", port)
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["publishNotReadyAddresses"] is True


# --- the rest of the contract ----------------------------------------------------------------


@pytest.mark.parametrize("values", VALUES_FILES, ids=lambda p: p.name)
def test_the_disruption_budget_and_the_metrics_service_select_the_dispatcher(values: Path,
                                                                             ) -> None:
    pod_labels = only("Deployment", values, component="dispatcher")["spec"]["template"][
        "metadata"]["labels"]
    budget = only("PodDisruptionBudget", values)
    assert budget["spec"]["maxUnavailable"] == 1
    assert budget["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    service = only("Service", values, component="dispatcher")
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert service["spec"]["ports"][0]["targetPort"] == "metrics"


def test_the_service_monitor_scrapes_the_metrics_port() -> None:
    monitor = only("ServiceMonitor", full_values())
    service = only("Service", full_values(), component="dispatcher")
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"][
        "labels"].items()
    assert monitor["spec"]["endpoints"][0]["port"] == service["spec"]["ports"][0]["name"]
    assert monitor["spec"]["endpoints"][0]["path"] == "/metrics"


def test_autoscaling_stops_at_one_pod_per_partition() -> None:
    scaled = only("ScaledObject", full_values())
    settings = settings_from(literal_env(dispatcher_container(full_values())))
    partitions = yaml.safe_load(full_values().read_text())["autoscaling"]["partitions"]
    assert scaled["spec"]["maxReplicaCount"] * settings.workers == partitions
    assert scaled["spec"]["scaleTargetRef"]["name"] == only(
        "Deployment", full_values(), component="dispatcher")["metadata"]["name"]
    trigger = scaled["spec"]["triggers"][0]
    assert (trigger["metadata"]["consumerGroup"], trigger["metadata"]["topic"]) == (
        settings.group, settings.input_topic)
    assert "replicas" not in only("Deployment", full_values(), component="dispatcher")["spec"]
    above = helm_template("-f", str(full_values()), "--set", "autoscaling.maxReplicas=13")
    assert above.returncode != 0
    assert "partitions / workers = 12" in above.stderr


def test_the_long_running_job_is_one_driver_against_a_spark_master() -> None:
    sets = ("reconcile.master=spark://spark-master:7077",)
    job = only("Deployment", default_values(), *sets, component="reconcile")
    assert job["spec"]["replicas"] == 1
    assert job["spec"]["strategy"]["type"] == "Recreate"
    spec = job["spec"]["template"]["spec"]
    args = spec["containers"][0]["args"]
    assert args[args.index("--master") + 1] == "spark://spark-master:7077"
    assert "--once" not in args
    assert spec["automountServiceAccountToken"] is False, "a standalone driver needs no API"
    assert not objects("Role", default_values(), *sets)
    local = helm_template("-f", str(default_values()), "--set", "reconcile.master=local[2]")
    assert local.returncode != 0
    assert "cannot grow" in local.stderr


# --- the reconciliation job on Kubernetes (reconcile.master: k8s) ------------------------------

NAMESPACE = "payments"
# What Spark's driver asks of the API server in client mode, and nothing more.
SPARK_DRIVER_RULES = {("pods", "create"), ("pods", "get"), ("pods", "list"), ("pods", "watch"),
                      ("pods", "patch"), ("pods", "delete"), ("pods", "deletecollection"),
                      ("configmaps", "create"), ("configmaps", "get"), ("configmaps", "list"),
                      ("configmaps", "delete"), ("configmaps", "deletecollection"),
                      ("persistentvolumeclaims", "list"),
                      ("persistentvolumeclaims", "deletecollection")}


def spark_k8s(values: Path = CHART / "ci" / "secured-values.yaml",
              release: str = "wl") -> dict[str, Any]:
    """The long-running job with master k8s, rendered in NAMESPACE: its objects by kind."""
    result = helm_template("-f", str(values), "--namespace", NAMESPACE, release=release)
    assert result.returncode == 0, result.stderr
    found: dict[str, Any] = {}
    for doc in (d for d in yaml.safe_load_all(result.stdout) if d):
        found.setdefault(doc["kind"], []).append(doc)
    return found


def spark_defaults(config_map: dict[str, Any]) -> dict[str, str]:
    return dict(line.split(None, 1) for line in
                config_map["data"]["spark-defaults.conf"].splitlines() if line.strip())


def test_spark_on_kubernetes_runs_the_driver_with_the_rbac_it_needs() -> None:
    docs = spark_k8s()
    (driver,) = [d for d in docs["Deployment"]
                 if d["metadata"]["labels"]["app.kubernetes.io/component"] == "reconcile"]
    spec = driver["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    args = container["args"]
    assert args[args.index("--master") + 1] == "k8s://https://kubernetes.default.svc:443"
    assert spec["automountServiceAccountToken"] is True
    accounts = {a["metadata"]["name"]: a for a in docs["ServiceAccount"]}
    assert spec["serviceAccountName"] in accounts
    (binding,) = docs["RoleBinding"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": spec["serviceAccountName"],
                                    "namespace": NAMESPACE}]
    assert "ClusterRole" not in docs and "ClusterRoleBinding" not in docs
    (role,) = docs["Role"]
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                  "name": role["metadata"]["name"]}
    granted = {(resource, verb) for rule in role["rules"] for resource in rule["resources"]
               for verb in rule["verbs"]}
    assert all(rule["apiGroups"] == [""] for rule in role["rules"])
    assert granted == SPARK_DRIVER_RULES
    assert container["securityContext"]["readOnlyRootFilesystem"] is True


def test_spark_on_kubernetes_reaches_the_driver_through_its_headless_service() -> None:
    docs = spark_k8s()
    (driver,) = [d for d in docs["Deployment"]
                 if d["metadata"]["labels"]["app.kubernetes.io/component"] == "reconcile"]
    pod = driver["spec"]["template"]
    (container,) = pod["spec"]["containers"]
    (config_map,) = [c for c in docs["ConfigMap"] if c["metadata"]["name"].endswith("spark-conf")]
    conf = spark_defaults(config_map)
    (service,) = [s for s in docs["Service"] if s["spec"].get("publishNotReadyAddresses")
                  and s["metadata"]["labels"]["app.kubernetes.io/component"] == "reconcile"]
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    assert conf["spark.driver.host"] == f"{service['metadata']['name']}.{NAMESPACE}.svc"
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    by_target = {p["targetPort"]: p["port"] for p in service["spec"]["ports"]}
    assert int(conf["spark.driver.port"]) == ports["spark-driver"] == by_target["spark-driver"]
    assert int(conf["spark.driver.blockManager.port"]) == ports["spark-blocks"] == by_target[
        "spark-blocks"]
    assert conf["spark.kubernetes.namespace"] == NAMESPACE
    assert conf["spark.kubernetes.container.image"] == container["image"]
    env = literal_env(container)
    mount = next(m for m in container["volumeMounts"] if m["name"] == "spark-conf")
    assert env["SPARK_CONF_DIR"] == mount["mountPath"]
    assert conf["spark.kubernetes.executor.podTemplateFile"] == (
        f"{mount['mountPath']}/executor-pod.yaml")


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_the_executor_pod_template_is_a_valid_pod_as_the_driver_runs(version: str) -> None:
    docs = spark_k8s()
    (config_map,) = [c for c in docs["ConfigMap"] if c["metadata"]["name"].endswith("spark-conf")]
    conf = spark_defaults(config_map)
    template = yaml.safe_load(config_map["data"]["executor-pod.yaml"])
    kubernetes_validate.validate(template, version, strict=True)
    (executor,) = template["spec"]["containers"]
    assert executor["name"] == conf["spark.kubernetes.executor.podTemplateContainerName"]
    assert executor["command"][-2:] == ["-m", "spark_jobs.k8s_executor"]
    assert importlib.util.find_spec("spark_jobs.k8s_executor") is not None
    assert executor["securityContext"]["readOnlyRootFilesystem"] is True
    assert template["spec"]["securityContext"]["runAsNonRoot"] is True
    assert template["spec"]["automountServiceAccountToken"] is False
    accounts = {a["metadata"]["name"] for a in docs["ServiceAccount"]}
    assert template["spec"]["serviceAccountName"] in accounts
    assert conf["spark.kubernetes.authenticate.executor.serviceAccountName"] == template["spec"][
        "serviceAccountName"]
    # The executors read Kafka where the driver does: the same certificates at the same paths.
    (driver,) = [d for d in docs["Deployment"]
                 if d["metadata"]["labels"]["app.kubernetes.io/component"] == "reconcile"]
    driver_spec = driver["spec"]["template"]["spec"]
    assert mounted_files(template["spec"], executor) == mounted_files(
        driver_spec, driver_spec["containers"][0])
    given = yaml.safe_load((CHART / "values.yaml").read_text())["reconcile"]["executors"]
    assert (conf["spark.executor.instances"], conf["spark.executor.cores"],
            conf["spark.executor.memory"], conf["spark.executor.memoryOverhead"]) == (
        str(given["instances"]), str(given["cores"]), given["memory"], given["memoryOverhead"])


def test_the_executors_take_the_connector_jars_from_the_image() -> None:
    (config_map,) = [c for c in spark_k8s()["ConfigMap"]
                     if c["metadata"]["name"].endswith("spark-conf")]
    image_cache = dockerfile_env(ROOT / "compose" / "Dockerfile.reconcile")["WAITLINE_CACHE_DIR"]
    assert spark_defaults(config_map)["spark.executor.extraClassPath"] == (
        f"{image_cache}/spark-jars/*")


def test_executor_pod_names_stay_within_sparks_limit_for_a_long_release() -> None:
    (config_map,) = [c for c in spark_k8s(release=LONG_RELEASE)["ConfigMap"]
                     if c["metadata"]["name"].endswith("spark-conf")]
    prefix = spark_defaults(config_map)["spark.kubernetes.executor.podNamePrefix"]
    assert len(prefix) <= 47 and re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", prefix)


def test_the_reconcile_job_reads_kafka_from_the_pods_variables_never_its_arguments() -> None:
    """One security configuration: the job's container gets the pod's Kafka variables (the
    password from the Secret) and no --kafka-option, so no credential is on a command line."""
    cron = only("CronJob", full_values())
    (container,) = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"]
    kafka = {name for name in literal_env(dispatcher_container(full_values()))
             if name.startswith(("WAITLINE_BOOTSTRAP", "WAITLINE_SECURITY", "WAITLINE_SASL",
                                 "WAITLINE_SSL"))}
    assert "WAITLINE_SASL_PASSWORD" in kafka
    job_env = {var["name"]: var for var in container["env"]}
    assert kafka <= set(job_env)
    assert "value" not in job_env["WAITLINE_SASL_PASSWORD"]
    assert "--kafka-option" not in container["args"]
    assert not any("SASL" in arg or "jaas" in arg for arg in container["args"])


def test_the_cron_job_runs_once_and_never_beside_another() -> None:
    cron = only("CronJob", full_values())
    assert cron["spec"]["concurrencyPolicy"] == "Forbid"
    args = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[:3] == ["reconcile", "--group", "payments"]
    assert "--once" in args
    both = helm_template("-f", str(full_values()), "--set", "reconcile.longRunning.enabled=true")
    assert both.returncode != 0
