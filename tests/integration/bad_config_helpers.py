"""The bad-configuration table's machinery: each component started with a bad Kafka configuration
(its `WAITLINE_*` variables alone) must end fast, non-zero, with one line naming the cause and the
setting, no stack trace, having written and committed nothing.

Components run in this process through the CLI (`waitline <command>`, typer's runner: the exit
code and stderr a shell sees, the time spent past imports), so the table stays cheap; one case
also runs each component as its own process, which times the whole command as an operator sees
it (`run_as_process`)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest
from aiokafka.admin import AIOKafkaAdminClient
from typer.testing import CliRunner

from dispatcher.cli import app
from dispatcher.kafka.config import KafkaConfig
from loadtest.harness.observe import committed_offsets

DEADLINE_S = 30.0  # the bound for each component to end
CONSOLE_CREDENTIALS = '{"ops": {"role": "operator", "token": "a-token-long-enough"}}'
NO_REGISTRY = "postgresql://127.0.0.1:9/none"  # never reached: Kafka is checked first
TRACE_MARKS = ("Traceback", "Exception in thread", "\tat org.", "\tat java.", "py4j")


def components(group: str, topic: str) -> dict[str, list[str]]:
    """Each component's command line for `group` (its topics) and input `topic`."""
    return {
        "pod": ["dispatch", "--input-topic", topic, "--group", group,
                "--counterparty-url", "http://127.0.0.1:9/", "--create-topics"],
        "reconcile": ["reconcile", "--group", group, "--once", "--dsn", NO_REGISTRY],
        "console": ["console", "--group", group, "--dsn", NO_REGISTRY, "--port", "0"],
        "dlq replay": ["dlq", "replay", "--group", group, "--yes", "--no-audit"],
        "dev status": ["dev", "status"],
    }


@dataclass(frozen=True)
class Outcome:
    component: str
    exit_code: int
    stderr: str
    seconds: float  # wall-clock, from start to exit
    cpu_s: float | None = None  # the process's own CPU time (run as a process)

    @property
    def error_lines(self) -> list[str]:
        return [line for line in self.stderr.splitlines() if line.startswith("error:")]


def case_env(state_dir: Path, variables: Mapping[str, str]) -> dict[str, str]:
    """This process's environment with only `variables` of the WAITLINE_* ones (and the cache,
    a state folder of the test's own, the console's credentials)."""
    env = {name: value for name, value in os.environ.items()
           if not name.startswith("WAITLINE_") or name == "WAITLINE_CACHE_DIR"}
    return {**env, "WAITLINE_STATE_DIR": str(state_dir),
            "WAITLINE_CONSOLE_CREDENTIALS": CONSOLE_CREDENTIALS, **variables}


def environment(monkeypatch: pytest.MonkeyPatch, state_dir: Path,
                variables: Mapping[str, str]) -> None:
    """`case_env` in this process (undone after the test)."""
    wanted = case_env(state_dir, variables)
    for name in [n for n in os.environ if n.startswith("WAITLINE_") and n not in wanted]:
        monkeypatch.delenv(name)
    for name, value in wanted.items():
        if name.startswith("WAITLINE_"):
            monkeypatch.setenv(name, value)


def run_in_process(component: str, argv: list[str]) -> Outcome:
    started = time.monotonic()
    result = CliRunner().invoke(app, argv)
    seconds = time.monotonic() - started
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(f"{component} raised {result.exception!r}") from result.exception
    return Outcome(component, result.exit_code, result.stderr, seconds)


def run_as_process(component: str, argv: list[str], env: Mapping[str, str],
                   folder: Path) -> Outcome:
    """The command as its own process (`python -m dispatcher`), timed from start to exit, with
    the CPU time it used (on a loaded machine the wall-clock time is mostly waiting for a
    core)."""
    stderr_path = folder / f"{component.replace(' ', '-')}.stderr"
    started = time.monotonic()
    with stderr_path.open("wb") as stderr:
        process = subprocess.Popen([sys.executable, "-m", "dispatcher", *argv], env=dict(env),
                                   stdout=subprocess.DEVNULL, stderr=stderr)
        _pid, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
    return Outcome(component, process.returncode, stderr_path.read_text(),
                   time.monotonic() - started, usage.ru_utime + usage.ru_stime)


def assert_one_clear_line(outcome: Outcome, line: str, exit_code: int = 2) -> None:
    """Non-zero (the documented code), exactly one error line, this one, no stack trace."""
    where = f"{outcome.component}: {outcome.stderr[-2000:]}"
    assert outcome.exit_code == exit_code, where
    assert outcome.error_lines == [f"error: {line}"], where
    assert not any(mark in outcome.stderr for mark in TRACE_MARKS), where


async def nothing_written(kafka: KafkaConfig, groups: list[str], topic: str) -> None:
    """No topic of these groups exists (none was created) and none committed an offset of the
    input `topic`."""
    admin = AIOKafkaAdminClient(**kafka.client_options())
    await admin.start()
    try:
        topics = await admin.list_topics()
    finally:
        await admin.close()
    assert [t for t in topics if any(t.startswith(f"{group}.") for group in groups)] == []
    for group in groups:
        assert await committed_offsets(kafka, group, topic) == {}, group
