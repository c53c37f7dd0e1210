"""The harness's processes run the code the harness itself imported: a `dispatcher` package in
the working directory (say, the main checkout while an A/B points PYTHONPATH at a worktree of
the old commit) must not shadow it, as `python -m` would by putting the working directory first
on `sys.path`."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadtest.harness.processes import spawn

pytestmark = pytest.mark.unit


def test_a_package_in_the_working_directory_does_not_shadow_the_imported_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shadow = tmp_path / "cwd" / "dispatcher"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("")
    (shadow / "__main__.py").write_text("print('the shadowing package ran')\n")
    monkeypatch.chdir(shadow.parent)
    log_path = tmp_path / "child.log"

    child = spawn(["--help"], log_path)

    assert child.wait(timeout=60) == 0
    output = log_path.read_text()
    assert "the shadowing package ran" not in output
    assert "waitline" in output.lower()
