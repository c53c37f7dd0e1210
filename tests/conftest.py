"""Shared fixtures: a real Kafka and a real PostgreSQL for the whole test session.

Both are started through `dispatcher.devstack.stack` (the code behind `waitline dev up`) in a
temporary folder on free ports, so tests never collide with a running dev stack, and are
stopped at the end. Tests isolate themselves by unique topic, group and wait-topic names
(`unique_name`).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from dispatcher.devstack.stack import LocalStack, StackPorts, free_ports
from dispatcher.errors import StackError


@pytest.fixture(scope="session")
def local_stack() -> Iterator[LocalStack]:
    """Kafka + PostgreSQL started for this test session (started lazily, on first use)."""
    home = Path(tempfile.mkdtemp(prefix="waitline-test-"))
    home.chmod(0o755)  # the PostgreSQL server runs as `postgres` and must reach its folder
    stack = LocalStack(home, StackPorts(*free_ports(3)))
    try:
        try:
            stack.up()
        except StackError:
            # A port chosen free can be taken by another process before the service binds it
            # (this machine is shared): one more try on fresh ports; a real failure repeats.
            stack = LocalStack(home, StackPorts(*free_ports(3)))
            stack.up()
        yield stack
    finally:
        stack.down()
        if not os.environ.get("WAITLINE_KEEP_TEST_STACK"):
            shutil.rmtree(home, ignore_errors=True)


@pytest.fixture(scope="session")
def kafka_bootstrap(local_stack: LocalStack) -> str:
    return local_stack.kafka.bootstrap_servers


@pytest.fixture(scope="session")
def pg_dsn(local_stack: LocalStack) -> str:
    return local_stack.postgres.dsn


@pytest.fixture
def unique_name() -> Callable[[str], str]:
    """`unique_name("orders")` -> "orders-1f2e3d4c5b6a": fresh names for topics and groups."""

    def make(prefix: str) -> str:
        return f"{prefix}-{uuid.uuid4().hex[:12]}"

    return make
