"""`waitline --help` and every command's help: one line saying what, and an example."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from dispatcher.cli import SUBCOMMANDS, app

pytestmark = pytest.mark.unit


def help_of(*args: str) -> str:
    result = CliRunner().invoke(app, [*args, "--help"], env={"COLUMNS": "120"})
    assert result.exit_code == 0, result.output
    return result.stdout


def test_root_help_lists_each_sub_command_with_its_one_liner_and_an_example() -> None:
    text = help_of()
    for name, (_, one_liner) in SUBCOMMANDS.items():
        assert f"{name} " in text and one_liner in text, name
    assert "Example: waitline dev up" in text


@pytest.mark.parametrize(
    "command",
    [("dlq",), ("dlq", "list"), ("dlq", "show"), ("dlq", "stats"), ("dlq", "replay"),
     ("dev",), ("dev", "up"), ("dev", "down"), ("dev", "status"), ("dispatch",),
     ("reconcile",), ("registry",), ("registry", "stats"), ("registry", "list"),
     ("registry", "migrate"), ("loadtest", "counterparty"), ("loadtest", "produce"),
     ("loadtest", "compare"), ("loadtest", "demo"), ("loadtest", "chaos"),
     ("loadtest", "mirror"), ("loadtest", "bench")],
)
def test_each_command_says_what_it_does_with_an_example(
    command: tuple[str, ...]
) -> None:
    text = help_of(*command)
    assert f"Example: waitline {command[0]}" in text
    summary = text.split("Usage:", 1)[1].strip().splitlines()[2].strip()
    assert summary.endswith("."), summary
