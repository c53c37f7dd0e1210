"""Shared fixtures: a real Kafka and a real PostgreSQL for the whole test session.

Both are started through `devstack.stack` (the code behind `waitline dev up`) in a
temporary folder on free ports, so tests never collide with a running dev stack, and are
stopped at the end. With `WAITLINE_STACK=testcontainers` (and a Docker engine) `kafka_bootstrap`
and `pg_dsn` come from containers instead (`devstack.containers`). Tests isolate
themselves by unique topic, group and wait-topic names (`unique_name`).
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from devstack.cluster import ClusterConnection, ClusterPorts, SecureCluster
from devstack.containers import (
    STACK_ENV,
    TESTCONTAINERS,
    container_stack,
    docker_unavailable_reason,
)
from devstack.postgres import PostgresService
from devstack.stack import LocalStack, StackPorts
from dispatcher.endpoints import StackConnection
from dispatcher.errors import StackError
from dispatcher.logs import HANDLER_NAME
from dispatcher.ports import free_port, free_ports

# Under `make test` (pytest-xdist, `--dist loadgroup`) the tests that need services run in
# groups, each in one worker on that worker's own session stack: the Spark tier (a JVM per job)
# beside the Kafka and PostgreSQL tier, so the two long tiers overlap; the service-free tests
# fill both workers around them. A Spark test marked `integration` too belongs to Spark. The
# secured cluster's tests are a third group, so one worker starts the cluster: xdist hands the
# largest groups out first, so it runs after whichever long tier ends first.
SERVICE_GROUPS = ("spark", "cluster", "integration")


def _service_group(item: pytest.Item) -> str | None:
    return next((name for name in SERVICE_GROUPS if item.get_closest_marker(name)), None)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--extended", action="store_true",
                     help="run the tests marked `extended` too (make test-extended, "
                          "make chaos-cluster)")


@pytest.hookimpl(wrapper=True)
def pytest_collection_modifyitems(
    config: pytest.Config, items: list[pytest.Item]
) -> Iterator[None]:
    if not config.getoption("extended"):
        for item in items:
            if item.get_closest_marker("extended"):
                item.add_marker(pytest.mark.skip(reason="outside make test's time: make "
                                                        "test-extended (pytest --extended)"))
    grouped = [(item, group) for item in items if (group := _service_group(item))]
    if config.pluginmanager.hasplugin("xdist"):
        for item, group in grouped:
            item.add_marker(pytest.mark.xdist_group(group))
    yield
    if config.getoption("loadgroup", False):  # an xdist worker, after xdist's own hook
        _name_the_groups(grouped)


def _name_the_groups(grouped: list[tuple[pytest.Item, str]]) -> None:
    """xdist tells its scheduler a test's group by a suffix on the test's id ("...@spark"),
    which pytest 9.2's structured ids drop without a word (pytest-dev/pytest-xdist#1386): the
    groups' tests then spread over both workers, each starting a stack. Add the suffix here
    where xdist's is missing; a no-op once xdist's works again."""
    unnamed = [(item, group) for item, group in grouped
               if not item.nodeid.endswith(f"@{group}")]
    if not unnamed:
        return
    from _pytest.nodeid import NodeId  # pytest >= 9.2, the ids xdist's suffix is lost on

    for item, group in unnamed:
        item._id = NodeId.parse(f"{item.nodeid}@{group}")


@pytest.fixture(autouse=True)
def _undo_command_logging() -> Iterator[None]:
    """A command run in-process (typer's CliRunner) sets up logging for the whole process
    (`dispatcher.logs`); undo it after the test, so the next test sees what it would alone."""
    loggers = [logging.getLogger(name) for name in ("", "aiokafka", "py4j")]
    levels = [logger.level for logger in loggers]
    yield
    root = loggers[0]
    for handler in [h for h in root.handlers if h.get_name() == HANDLER_NAME]:
        root.removeHandler(handler)
    for logger, level in zip(loggers, levels, strict=True):
        logger.setLevel(level)


_Started = TypeVar("_Started", LocalStack, SecureCluster)


def _up(make: Callable[[int], _Started]) -> _Started:
    """`make(0).up()`. A port chosen free can be taken by another process before the service
    binds it (this machine is shared): then one more try, `make(1)` on fresh ports; a real
    failure repeats. A failed `up` stops what it started."""
    started = make(0)
    try:
        started.up()
    except StackError:
        started = make(1)
        started.up()
    return started


@pytest.fixture(scope="session")
def local_stack() -> Iterator[LocalStack]:
    """Kafka + PostgreSQL started for this test session (started lazily, on first use)."""
    home = Path(tempfile.mkdtemp(prefix="waitline-test-"))
    home.chmod(0o755)  # the PostgreSQL server runs as `postgres` and must reach its folder
    try:
        stack = _up(lambda _attempt: LocalStack(home, StackPorts(*free_ports(3))))
        try:
            yield stack
        finally:
            stack.down()
    finally:
        if not os.environ.get("WAITLINE_KEEP_TEST_STACK"):
            shutil.rmtree(home, ignore_errors=True)


@pytest.fixture(scope="session")
def secure_cluster() -> Iterator[SecureCluster]:
    """The secured three-node cluster (TLS everywhere, SCRAM-SHA-512 and mTLS clients, RF 3,
    min ISR 2) for this session, started lazily on first use, in a temporary folder on free
    ports; `.nodes[n]` stops, starts, kills, freezes and thaws one node. A test that stops a
    node starts it again before it ends. Tests using it are marked `cluster`, which puts them
    in one xdist group: one worker starts it."""
    home = Path(tempfile.mkdtemp(prefix="waitline-cluster-"))
    try:
        cluster = _up(lambda attempt: SecureCluster(home / f"try-{attempt}", ClusterPorts.free()))
        try:
            yield cluster
        finally:
            cluster.down()
    finally:
        if not os.environ.get("WAITLINE_KEEP_TEST_STACK"):
            shutil.rmtree(home, ignore_errors=True)


@pytest.fixture(scope="session")
def cluster_connection(secure_cluster: SecureCluster) -> ClusterConnection:
    """What a client needs to reach the secured cluster: `.env(auth)` is the `WAITLINE_*`
    mapping a command reads, `.kafka_config(auth)` the clients' configuration built from it."""
    return secure_cluster.connection()


@pytest.fixture(scope="module")
def registry_dsn() -> Iterator[str]:
    """A PostgreSQL of the module's own with the registry's schema, for the Spark job on the
    secured cluster (the cluster's tests run in a worker of their own, without the local
    stack)."""
    home = Path(tempfile.mkdtemp(prefix="waitline-cluster-pg-"))
    home.chmod(0o755)  # the server runs as `postgres` and must reach its folder
    postgres = PostgresService(home / "postgres", free_port())
    try:
        postgres.start()
        postgres.wait_healthy()
        postgres.ensure_database()
        yield postgres.dsn
    finally:
        postgres.stop()
        shutil.rmtree(home, ignore_errors=True)


@pytest.fixture(scope="session")
def services(request: pytest.FixtureRequest) -> Iterator[StackConnection]:
    """Where Kafka and PostgreSQL are: the local stack, or with WAITLINE_STACK=testcontainers
    throwaway containers (skipped, with the reason, where there is no Docker engine)."""
    if os.environ.get(STACK_ENV) != TESTCONTAINERS:
        yield request.getfixturevalue("local_stack").connection()
        return
    reason = docker_unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    with container_stack() as connection:
        yield connection


@pytest.fixture(scope="session")
def kafka_bootstrap(services: StackConnection) -> str:
    return services.bootstrap_servers


@pytest.fixture(scope="session")
def pg_dsn(services: StackConnection) -> str:
    return services.pg_dsn


@pytest.fixture
def unique_name() -> Callable[[str], str]:
    """`unique_name("orders")` -> "orders-1f2e3d4c5b6a": fresh names for topics and groups."""

    def make(prefix: str) -> str:
        return f"{prefix}-{uuid.uuid4().hex[:12]}"

    return make


@pytest.fixture
def spans() -> Iterator[Any]:
    """Tracing on, into an in-memory exporter (the `otel` extra), for the test's duration."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from dispatcher import tracing

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.use(provider)
    try:
        yield exporter
    finally:
        tracing.use(None)
