"""What the dashboard and the alert rules under compose/ query, for the tests that hold them to
the real metrics of the pod and of the reconciliation job."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

COMPOSE = Path(__file__).resolve().parents[2] / "compose"


def metric_names_used() -> set[str]:
    """Every waitline_* metric the alert rules and the dashboard query."""
    rules = yaml.safe_load((COMPOSE / "prometheus" / "alerts.yml").read_text())
    exprs = [rule["expr"] for group in rules["groups"] for rule in group["rules"]]
    dashboard = json.loads((COMPOSE / "grafana" / "dashboards" / "waitline.json").read_text())
    exprs += [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    return {name for expr in exprs for name in re.findall(r"\bwaitline_[a-z_]+", expr)}


def is_job_metric(name: str) -> bool:
    """Metrics of the reconciliation job (spark_jobs/metrics.py); the rest are the pod's."""
    return name.startswith("waitline_reconcile_")


def family(name: str) -> str:
    """A sample name's metric family: counters' _total, histograms' _bucket/_sum/_count off."""
    return re.sub(r"_(total|bucket|sum|count)$", "", name)
