"""The chart (deploy/helm/waitline) as `helm template` renders it, and the helm that renders
it: for the chart's own tests (tests/unit/test_deploy_chart.py) and the tests that run what it
renders (tests/integration)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

CHART = Path(__file__).resolve().parents[1] / "deploy" / "helm" / "waitline"
DEFAULT_VALUES = CHART / "ci" / "default-values.yaml"


def helm_binary() -> str:
    """The helm `make setup` built and linked into the virtualenv, else the one in Go's bin
    folder, else one on PATH."""
    linked = Path(sys.prefix) / "bin" / "helm"
    if linked.is_file():
        return str(linked)
    found = None
    if shutil.which("go"):
        gobin, gopath = subprocess.run(["go", "env", "GOBIN", "GOPATH"], capture_output=True,
                                       text=True, check=True).stdout.split("\n")[:2]
        built = Path(gobin or Path(gopath) / "bin") / "helm"
        found = str(built) if built.is_file() else None
    found = found or shutil.which("helm")
    assert found, "helm is missing: run `make setup` (it builds helm from the Go module proxy)"
    return found


def helm_render(*args: str, values: Path = DEFAULT_VALUES, sets: tuple[str, ...] = (),
                ) -> list[dict[str, Any]]:
    """The objects `helm template` renders from `values`, `sets` (--set) and `args`."""
    result = subprocess.run(
        [helm_binary(), "template", "wl", str(CHART), "-f", str(values), *args,
         *(arg for s in sets for arg in ("--set", s))],
        capture_output=True, text=True, check=False, timeout=60)
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]
