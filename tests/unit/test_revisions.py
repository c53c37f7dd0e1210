"""`waitline loadtest revisions`' set-up: a revision's tree is exported whole and a pod child
imports that tree's code, not this checkout's; a name that is no commit, or bad windows, is
refused before anything runs."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from loadtest.bench.pod_cpu import CpuSample, markdown
from loadtest.bench.revisions import (
    REPO,
    baseline_variants,
    export_revision,
    imported_from,
    interpreter_variants,
    peer_variants,
    variant,
)
from loadtest.cli import app
from loadtest.cli_common import CONFIG_EXIT_CODE, FAILURE_EXIT_CODE
from loadtest.harness.processes import HarnessError

pytestmark = pytest.mark.unit


def test_a_revisions_pod_imports_the_exported_tree(tmp_path: Path) -> None:
    tree = tmp_path / "base"
    (tree / "stale.txt").parent.mkdir(parents=True)
    (tree / "stale.txt").write_text("left by an earlier export")
    name = export_revision("HEAD", tree)
    assert len(name) == 9
    assert (tree / "dispatcher" / "pod" / "engine.py").is_file()
    assert not (tree / "stale.txt").exists()
    assert imported_from(tree) == tree
    assert variant("base", tree).env == {"PYTHONPATH": str(tree)}


def test_this_checkout_is_its_own_variant() -> None:
    assert imported_from(REPO) == REPO


def test_a_tree_that_is_not_a_checkout_is_refused(tmp_path: Path) -> None:
    with pytest.raises(HarnessError, match="imports dispatcher from"):
        variant("empty", tmp_path)


def test_a_name_that_is_no_commit_is_refused(tmp_path: Path) -> None:
    with pytest.raises(HarnessError, match="not a commit"):
        export_revision("no-such-branch-anywhere", tmp_path / "x")
    result = CliRunner().invoke(app, ["revisions", "--base", "no-such-branch-anywhere"])
    assert result.exit_code == FAILURE_EXIT_CODE
    assert "not a commit" in result.output


@pytest.mark.parametrize("windows", ["0", "x", ","])
def test_bad_windows_are_refused(windows: str) -> None:
    result = CliRunner().invoke(app, ["revisions", "--base", "HEAD", "--windows", windows])
    assert result.exit_code == CONFIG_EXIT_CODE
    assert "--windows" in result.output


def test_an_interpreter_variant_runs_this_checkout_with_that_python() -> None:
    this, other = interpreter_variants(sys.executable, "bare-wait-tuned")
    assert other.python == sys.executable and other.loop == "bare-wait-tuned"
    assert other.env == {"PYTHONPATH": str(REPO)} and other.args == ()
    assert this.name.startswith(f"Python {sys.version.split()[0]} ")


def test_an_interpreter_that_cannot_run_the_pod_is_refused(tmp_path: Path) -> None:
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\necho 'no module named dispatcher' >&2\nexit 1\n")
    fake.chmod(0o755)
    with pytest.raises(HarnessError, match="cannot run this checkout's pod"):
        interpreter_variants(str(fake))


def test_a_peer_variant_runs_the_peer_on_its_python_beside_this_pod() -> None:
    pod, peer = peer_variants("pyrallel-consumer", sys.executable)
    assert pod.loop == "pod" and pod.python == sys.executable
    assert pod.args == ("--counterparty-url", "{url}")
    assert peer.loop == "pyrallel-consumer" and peer.python == sys.executable
    assert peer.env == {"PYTHONPATH": str(REPO)} and peer.args == ()
    assert peer.name.startswith("pyrallel-consumer, Python ")


def test_an_unknown_peer_is_refused() -> None:
    result = CliRunner().invoke(app, ["peer-cpu", "--python", sys.executable, "--peer",
                                      "no-such-peer"])
    assert result.exit_code == CONFIG_EXIT_CODE
    assert "--peer 'no-such-peer'" in result.output
    assert "bare-wait" in result.output  # the baselines are named among the choices


def test_the_protocol_floor_runs_first_beside_this_pod_on_this_interpreter() -> None:
    """First, so the table's "second / first" reads the pod's CPU over the floor's."""
    floor, pod = baseline_variants("bare-wait")
    assert pod.loop == "pod" and floor.loop == "bare-wait"
    assert floor.python == pod.python == sys.executable and floor.args == ()
    assert floor.name.startswith("bare-wait, Python ")


def test_a_malformed_latency_model_is_refused_before_anything_runs() -> None:
    result = CliRunner().invoke(app, ["peer-cpu", "--peer", "bare-wait", "--model",
                                      "fixed:100+nonsense"])
    assert result.exit_code == CONFIG_EXIT_CODE
    assert "nonsense" in result.output


def test_the_side_by_side_table_gives_the_median_of_the_rounds_ratios_and_their_range() -> None:
    rounds = [(0.20, 0.21), (0.30, 0.36), (0.25, 0.25)]  # (first, second): 1.05, 1.20, 1.00
    samples = [sample for a, b in rounds
               for sample in (CpuSample("floor", 100, 12_000, a, 930.0),
                              CpuSample("pod", 100, 12_000, b, 970.0))]
    row = markdown(samples, ("floor", "pod")).splitlines()[2]
    assert row.startswith("| 100 | 0.250 | 0.250 | 1.000 | 1.050 (1.000 to 1.200) |")
