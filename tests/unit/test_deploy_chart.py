"""The Helm chart (deploy/helm/waitline) holds the pod's contract, read from the rendered objects.

Rendered with `helm template` (built by `make setup`) for each values file under the chart's
`ci/` folder: every object validates against the Kubernetes schemas (`kubernetes-validate`,
strict: no unknown field); the probes point at the port the pod is told to bind (their paths
answer on the pod's own server: tests/integration/test_deploy_pod.py); the grace period
outlasts the drain grace and the Kafka clients' close bound (both read from the code); every
variable the chart sets is one the program in that container reads (derived from the settings
classes and the CLI's options); every container runs `waitline <sub-command>` with flags that
sub-command has, as the images' user.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import shutil
import subprocess
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import opentelemetry.environment_variables
import opentelemetry.sdk.environment_variables
import pytest
import typer.main
import yaml

from dispatcher.cli import SUBCOMMANDS, app
from dispatcher.console.pod_status import dns_target
from dispatcher.console.sampler import WatchSettings
from dispatcher.console.settings import ENV_PREFIX as CONSOLE_ENV_PREFIX
from dispatcher.console.settings import ConsoleSettings
from dispatcher.endpoints import BOOTSTRAP_ENV, DSN_ENV
from dispatcher.handlers.http_config import ENV_PREFIX as HTTP_ENV_PREFIX
from dispatcher.handlers.http_config import HttpHandlerConfig, load_http_config
from dispatcher.kafka.clients import CLOSE_TIMEOUT_S
from dispatcher.kafka.config import KafkaClientSettings
from dispatcher.paths import CACHE_DIR_ENV, STATE_DIR_ENV
from dispatcher.pod.settings import DispatchSettings, load_settings
from dispatcher.tracing import exporters_asked

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "waitline"
VALUES_FILES = sorted((CHART / "ci").glob("*-values.yaml"))
# The oldest and the newest Kubernetes the chart is checked against.
KUBERNETES_VERSIONS = ("1.29.0", "1.34.0")
# Custom resources: no schema ships with Kubernetes; their fields are checked one by one below.
CUSTOM_KINDS = {"ServiceMonitor": "monitoring.coreos.com/v1", "ScaledObject": "keda.sh/v1alpha1"}
SECRET_PLACEHOLDER = "from-a-secret"


def helm() -> str:
    """The helm `make setup` built (in Go's bin folder), else one on PATH."""
    gobin, gopath = subprocess.run(
        ["go", "env", "GOBIN", "GOPATH"], capture_output=True, text=True, check=False,
    ).stdout.split("\n")[:2] if shutil.which("go") else ("", "")
    built = Path(gobin or Path(gopath) / "bin") / "helm"
    found = str(built) if built.is_file() else shutil.which("helm")
    assert found, "helm is missing: run `make setup` (it builds helm from the Go module proxy)"
    return found


def helm_template(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([helm(), "template", "wl", str(CHART), *args], capture_output=True,
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


def test_the_ci_values_files_exist() -> None:
    assert {p.name for p in VALUES_FILES} >= {"default-values.yaml", "full-values.yaml"}


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
            assert doc["apiVersion"] == CUSTOM_KINDS[doc["kind"]], doc["kind"]
            continue
        kubernetes_validate.validate(doc, version, strict=True)


def test_the_full_values_render_every_kind_the_chart_has() -> None:
    kinds = {doc["kind"] for doc in rendered(full_values())}
    assert kinds == {"Deployment", "CronJob", "Service", "Secret", "ConfigMap",
                     "PodDisruptionBudget", "ServiceMonitor", "ScaledObject"}
    assert "PersistentVolumeClaim" in {doc["kind"] for doc in rendered(default_values())}


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
        return common | cli_env("reconcile") | {BOOTSTRAP_ENV, DSN_ENV}
    if component == "console":
        return (common | settings_env(KafkaClientSettings, "WAITLINE_") | {DSN_ENV}
                | settings_env(ConsoleSettings, CONSOLE_ENV_PREFIX)
                | settings_env(WatchSettings, CONSOLE_ENV_PREFIX) | cli_env("console"))
    raise AssertionError(f"unknown component {component}")


# Variables for the interpreter and the JVM themselves, each with what makes it read.
RUNTIME_ENV = {
    "PYTHONPATH": "the Python interpreter (the handler modules' folder)",
    "PYSPARK_SUBMIT_ARGS": "pyspark.java_gateway, which passes it to spark-submit",
}


def test_the_runtime_variables_are_read_by_what_they_name() -> None:
    import pyspark.java_gateway

    source = Path(str(pyspark.java_gateway.__file__)).read_text()
    assert 'os.environ.get("PYSPARK_SUBMIT_ARGS"' in source
    out = subprocess.run(["python3", "-c", "import sys; print(sys.path)"], check=True,
                         capture_output=True, text=True, env={"PYTHONPATH": "/opt/x"}).stdout
    assert "/opt/x" in out


@pytest.mark.parametrize("values", VALUES_FILES, ids=lambda p: p.name)
def test_every_variable_the_chart_sets_is_one_the_program_reads(values: Path) -> None:
    checked = 0
    for component, spec in pod_specs(values):
        for container in spec["containers"]:
            reads = program_reads(component) | set(RUNTIME_ENV)
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
    """The pod's settings from the container's variables alone (the environment it runs in)."""
    with environment(env):
        return load_settings()


def test_settings_the_chart_owns_are_refused_in_settings() -> None:
    for name in ("metrics-port", "counterparty-url", "bootstrap-servers"):
        result = helm_template("-f", str(default_values()), "--set",
                               f"dispatcher.settings.{name}=x")
        assert result.returncode != 0, name


def test_the_http_handlers_credentials_come_from_a_secret() -> None:
    env = {var["name"]: var for var in dispatcher_container(full_values())["env"]}
    secrets = {doc["metadata"]["name"]: doc for doc in objects("Secret", full_values())}
    for name in ("WAITLINE_HTTP_BEARER_TOKEN", "WAITLINE_HTTP_BASIC_PASSWORD",
                 "WAITLINE_SASL_PASSWORD"):
        assert "value" not in env[name], f"{name} in clear in the pod spec"
        assert env[name]["valueFrom"]["secretKeyRef"]["name"] in secrets
    token = env["WAITLINE_HTTP_BEARER_TOKEN"]["valueFrom"]["secretKeyRef"]
    assert secrets[token["name"]]["stringData"][token["key"]] == "token-from-values"


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


# --- commands and the image ----------------------------------------------------------------


def dockerfile_user(path: Path) -> str:
    return re.findall(r"^USER\s+(\S+)", path.read_text(), re.MULTILINE)[-1]


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
    job = only("Deployment", default_values(), component="reconcile")
    assert job["spec"]["replicas"] == 1
    assert job["spec"]["strategy"]["type"] == "Recreate"
    args = job["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--master") + 1].startswith("spark://")
    assert "--once" not in args
    local = helm_template("-f", str(default_values()), "--set",
                          "reconcile.longRunning.sparkMaster=local[2]")
    assert local.returncode != 0


def test_the_cron_job_runs_once_and_never_beside_another() -> None:
    cron = only("CronJob", full_values())
    assert cron["spec"]["concurrencyPolicy"] == "Forbid"
    args = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[:3] == ["reconcile", "--group", "payments"]
    assert "--once" in args
    both = helm_template("-f", str(full_values()), "--set", "reconcile.longRunning.enabled=true")
    assert both.returncode != 0
