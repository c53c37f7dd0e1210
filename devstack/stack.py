"""The local stack: a real single-node Kafka (KRaft) and a real PostgreSQL as local processes;
with the cluster profile, the secured three-node cluster (`devstack/cluster.py`) in place of the
single PLAINTEXT broker; on request a Spark cluster, and a Cassandra node for the peers
benchmark (`devstack/cassandra.py`).

No Docker: Kafka runs from the Apache Kafka jars that `make setup` fetched from Maven Central
(`$WAITLINE_CACHE_DIR/kafka-libs`), PostgreSQL from Debian's package, as the `postgres` user when
we are root (the server refuses root). Each service lives in a folder of its own under the stack's
state folder, listens on loopback only, and is started detached so it outlives the command that
started it. `LocalStack` is used by `waitline dev` and by the test fixtures alike.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from devstack.cassandra import CassandraService
from devstack.cluster import SecureCluster
from devstack.kafka import KafkaService
from devstack.postgres import PostgresService
from devstack.processes import ServiceStatus
from devstack.spark import SparkClusterService, SparkPorts
from dispatcher.endpoints import StackConnection
from dispatcher.ports import free_port, port_is_free

# Re-exported: tests, the load-test harness and helpers' notes import these from here.
__all__ = ["CassandraService", "KafkaService", "LocalStack", "PostgresService", "SecureCluster",
           "ServiceStatus", "SparkClusterService", "StackPorts"]


@dataclass
class StackPorts:
    kafka: int
    kafka_controller: int
    postgres: int
    spark_master: int = 17077
    spark_master_ui: int = 18080
    spark_worker_ui: int = 18081
    cassandra: int = 19042  # CQL; the peers benchmark only (`dev up --cassandra`)
    cassandra_storage: int = 17000

    @classmethod
    def choose(cls, preferred: StackPorts | None = None) -> StackPorts:
        """Keep preferred ports when they are free, else take free ones."""
        defaults = preferred or cls(19092, 19093, 15432)
        return cls(*(port if port_is_free(port) else free_port()
                     for port in asdict(defaults).values()))

    @property
    def spark(self) -> SparkPorts:
        return SparkPorts(self.spark_master, self.spark_master_ui, self.spark_worker_ui)


class LocalStack:
    """Kafka + PostgreSQL under one state folder, the secured cluster in its `cluster/` folder;
    the connection file (the single broker's and PostgreSQL's addresses) lives there too."""

    def __init__(self, state_dir: Path, ports: StackPorts | None = None) -> None:
        self.state_dir = state_dir
        self._use_ports(ports or self._saved_ports() or StackPorts(19092, 19093, 15432))
        self.cluster = SecureCluster(state_dir / "cluster")

    def _use_ports(self, ports: StackPorts) -> None:
        self.ports = ports
        self.kafka = KafkaService(self.state_dir / "kafka", ports.kafka, ports.kafka_controller)
        self.postgres = PostgresService(self.state_dir / "postgres", ports.postgres)
        self.spark = SparkClusterService(self.state_dir / "spark", ports.spark)
        self.cassandra = CassandraService(self.state_dir / "cassandra", ports.cassandra,
                                          ports.cassandra_storage)

    @property
    def _ports_path(self) -> Path:
        return self.state_dir / "ports.json"

    @property
    def connection_path(self) -> Path:
        return self.state_dir / "stack.json"

    def _saved_ports(self) -> StackPorts | None:
        try:
            return StackPorts(**json.loads(self._ports_path.read_text()))
        except (FileNotFoundError, ValueError, TypeError):
            return None

    def connection(self) -> StackConnection:
        return StackConnection(self.kafka.bootstrap_servers, self.postgres.dsn)

    def up(self, *, spark: bool = False, cluster: bool = False,
           cassandra: bool = False) -> list[str]:
        """Start what is not running: PostgreSQL, the single broker or (`cluster`) the secured
        cluster, the Spark cluster too when `spark`, a Cassandra node when `cassandra` (the
        peers benchmark's); wait until it answers; returns what was started. The connection
        file names the single broker, so only its profile writes it."""
        self.state_dir.mkdir(parents=True, exist_ok=True)
        if all(service.pid() is None for service in (self.kafka, self.postgres, self.spark,
                                                     self.cassandra)):
            # Nothing of ours runs: re-check that the remembered ports are still free.
            self._use_ports(StackPorts.choose(self.ports))
        self._ports_path.write_text(json.dumps(asdict(self.ports)) + "\n")
        started = []
        services: list[PostgresService | KafkaService | SparkClusterService
                       | CassandraService] = [
            self.postgres, *([] if cluster else [self.kafka]), *([self.spark] if spark else []),
            *([self.cassandra] if cassandra else [])]
        try:  # a service that fails to start stops the ones started before it
            for service in services:
                if service.pid() is None:
                    service.start()
                    started.append(service.name)
            if cluster:
                started += self.cluster.up()
            self.postgres.wait_healthy()
            self.postgres.ensure_database()
            if not cluster:
                self.kafka.wait_healthy()
            if spark:
                self.spark.wait_healthy()
            if cassandra:
                self.cassandra.wait_healthy()
        except BaseException:
            self.down()
            raise
        if not cluster:
            self.connection().write(self.connection_path)
        return started

    def down(self) -> list[str]:
        """Stop everything this stack started, both profiles; returns what was stopped."""
        stopped = []
        for service in (self.cassandra, self.spark, self.kafka):
            if service.pid() is not None:
                service.stop()
                stopped.append(service.name)
        stopped += self.cluster.down()
        if self.postgres.pid() is not None:
            self.postgres.stop()
            stopped.append(self.postgres.name)
        self.connection_path.unlink(missing_ok=True)
        return stopped

    def status(self, *, cluster: bool = False) -> list[ServiceStatus]:
        """PostgreSQL and the broker(s) of the profile: the single broker, or with `cluster`
        the secured cluster's nodes (and the single broker only while it runs too); the Spark
        cluster and Cassandra while they run (both are optional)."""
        kafka = ([self.kafka.status()] if not cluster or self.kafka.pid() is not None else [])
        nodes = self.cluster.status() if cluster else []
        optional = [service.status() for service in (self.spark, self.cassandra)
                    if service.pid() is not None]
        return [*kafka, *nodes, self.postgres.status(), *optional]
