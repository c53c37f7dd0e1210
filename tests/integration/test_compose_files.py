"""What can be checked of compose/ without a Docker engine: the compose file parses, its images
are pinned, every command it runs is a real `waitline` command, its WAITLINE_* variables are
settings the pod reads, and Prometheus scrapes the pod's and the job's metrics ports. That the
dashboard and the alert rules name only metric families the pod or the job serves is checked in
a real scrape: tests/integration/test_pod_observability.py, test_reconcile_metrics.py."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
import yaml
from observability_refs import COMPOSE
from typer.testing import CliRunner

from dispatcher.cli import app
from dispatcher.pod.settings import DispatchSettings

pytestmark = pytest.mark.unit

OURS = {"compose/Dockerfile", "compose/Dockerfile.reconcile"}


def compose_services() -> dict[str, dict[str, Any]]:
    services: dict[str, dict[str, Any]] = yaml.safe_load(
        (COMPOSE / "docker-compose.yml").read_text())["services"]
    return services


def test_every_image_is_pinned_or_built_here() -> None:
    for name, service in compose_services().items():
        if "build" in service:
            assert f"compose/{service['build']['dockerfile'].split('/')[-1]}" in OURS, name
            assert (COMPOSE.parent / service["build"]["dockerfile"]).is_file(), name
        else:
            image = service["image"]
            assert re.fullmatch(r"[\w./-]+:v?\d+(\.\d+)+", image), f"{name}: {image} not pinned"


@pytest.mark.parametrize("service", [n for n, s in compose_services().items() if "build" in s])
def test_every_command_is_a_real_waitline_command(service: str) -> None:
    command = compose_services()[service]["command"]
    words = [w for w in command if not w.startswith("-")][:2]
    result = CliRunner().invoke(app, [*words, "--help"])
    assert result.exit_code == 0, f"{service}: waitline {' '.join(words)} --help: {result.output}"
    for flag in (w for w in command if w.startswith("--")):
        assert flag in result.output, f"{service}: waitline {' '.join(words)} has no {flag}"


def test_the_pods_environment_names_its_settings() -> None:
    environment = compose_services()["dispatcher"]["environment"]
    fields = {f"WAITLINE_{name.upper()}" for name in DispatchSettings.model_fields}
    assert set(environment) <= fields, set(environment) - fields
    assert f":{environment['WAITLINE_METRICS_PORT']}" in json.dumps(
        yaml.safe_load((COMPOSE / "prometheus" / "prometheus.yml").read_text()))


def test_prometheus_scrapes_the_reconciliation_jobs_metrics_port() -> None:
    command = compose_services()["reconcile"]["command"]
    port = command[command.index("--metrics-port") + 1]
    assert f"reconcile:{port}" in json.dumps(
        yaml.safe_load((COMPOSE / "prometheus" / "prometheus.yml").read_text()))

