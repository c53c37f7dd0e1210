"""WAITLINE_STACK=testcontainers: the container backend of the test stack, where there is no
Docker engine (as on the CI machine), skips the tests that need services with a one-line reason."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from devstack.containers import STACK_ENV, TESTCONTAINERS, docker_unavailable_reason

pytestmark = pytest.mark.integration


def test_without_docker_the_container_stack_skips_with_its_reason() -> None:
    reason = docker_unavailable_reason()
    if reason is None:
        pytest.skip("a Docker engine answers here: the container stack would really start")
    completed = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
         "tests/integration/test_stack.py::"
         "test_postgres_round_trips_a_row_in_the_migrated_database"],
        env={**os.environ, STACK_ENV: TESTCONTAINERS}, capture_output=True, text=True,
        timeout=110, check=False,
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert "1 skipped" in completed.stdout
    (skipped,) = [line for line in completed.stdout.splitlines() if "SKIPPED" in line]
    assert skipped.endswith(reason)
    assert "needs a Docker engine" in reason
