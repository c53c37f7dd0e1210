"""The tracing micro-benchmark (loadtest/bench/trace_cost.py) runs each variant and reports the
cost of a sampling ratio from them; a sampled record costs more than an unsampled one."""

from __future__ import annotations

import pytest

from loadtest.bench import trace_cost

pytestmark = pytest.mark.unit


def test_it_reports_each_variant_and_a_ratios_cost(capsys: pytest.CaptureFixture[str]) -> None:
    trace_cost.main(["--rounds", "1", "--records", "300"])
    out = capsys.readouterr().out
    rows = {line.split("|")[1].strip(): float(line.split("|")[2])
            for line in out.splitlines() if line.startswith("| ") and "variant" not in line}
    assert rows.keys() == set(trace_cost.VARIANTS)
    assert rows["sampled"] > rows["not sampled"]
    assert "ratio 0.1:" in out
