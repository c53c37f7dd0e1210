"""The alert rules under Prometheus's own tool: `promtool check rules`, the rules' unit tests
(compose/prometheus/alerts.test.yml: each alert fires on its series and not on a healthy pod)
and the scrape configuration's syntax. `make setup` installs promtool (Debian's prometheus)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

PROMETHEUS = Path(__file__).resolve().parents[2] / "compose" / "prometheus"


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    tool = shutil.which("promtool")
    assert tool is not None, "promtool is missing: run `make setup` (Debian package prometheus)"
    return subprocess.run([tool, *args], cwd=PROMETHEUS, capture_output=True, text=True,
                          timeout=60, check=False)


@pytest.mark.parametrize("args", [
    ("check", "rules", "alerts.yml"),
    ("test", "rules", "alerts.test.yml"),
    ("check", "config", "--syntax-only", "prometheus.yml"),
])
def test_promtool_accepts_the_rules_and_their_tests(args: tuple[str, ...]) -> None:
    result = promtool(*args)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout
