"""The optional test stack on machines with a Docker engine: Kafka and PostgreSQL as throwaway
containers (testcontainers, a `dev` extra), chosen with `WAITLINE_STACK=testcontainers`.

The local-process stack (`devstack.stack`) stays the default and the only one that
fault tests can break (kill the broker, stop PostgreSQL). Here the schema is applied by the same
migrator as `waitline dev up`; the images are pinned.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path

from connectors.migrate import apply_migrations
from dispatcher.endpoints import StackConnection

STACK_ENV = "WAITLINE_STACK"
TESTCONTAINERS = "testcontainers"
KAFKA_IMAGE = "confluentinc/cp-kafka:7.9.0"  # Apache Kafka 3.9, KRaft
POSTGRES_IMAGE = "postgres:17.5-alpine"
DEFAULT_DOCKER_SOCKET = "/var/run/docker.sock"


def docker_unavailable_reason() -> str | None:
    """Why the container stack cannot run here, in one line; None when a Docker engine answers."""
    needs = f"{STACK_ENV}={TESTCONTAINERS} needs a Docker engine"
    if not os.environ.get("DOCKER_HOST") and not Path(DEFAULT_DOCKER_SOCKET).exists():
        return f"{needs}: DOCKER_HOST is unset and there is no {DEFAULT_DOCKER_SOCKET}"
    try:
        import docker  # noqa: PLC0415 - only with the `dev` extra, only for this backend
    except ImportError:
        return f"{STACK_ENV}={TESTCONTAINERS} needs the `dev` extra (testcontainers)"
    try:
        with closing(docker.from_env()) as client:
            client.ping()
    except Exception as exc:  # noqa: BLE001 - any failure means "no engine to use"
        return f"{needs}: {type(exc).__name__}: {str(exc)[:120]}"
    return None


@contextmanager
def container_stack() -> Iterator[StackConnection]:
    """Kafka (KRaft) and a migrated PostgreSQL in containers, removed on exit."""
    from testcontainers.community.kafka import KafkaContainer  # noqa: PLC0415
    from testcontainers.community.postgres import PostgresContainer  # noqa: PLC0415

    postgres = PostgresContainer(POSTGRES_IMAGE, username="postgres", password="waitline",
                                 dbname="waitline", driver=None)
    with KafkaContainer(KAFKA_IMAGE).with_kraft() as kafka, postgres:
        dsn = postgres.get_connection_url(driver=None)
        apply_migrations(dsn)
        yield StackConnection(kafka.get_bootstrap_server(), dsn)
