"""Where Waitline keeps files on this machine: one resolver for every path setting.

- `WAITLINE_CACHE_DIR` (default `<repo>/.cache`): downloads `make setup` fetched once and later
  runs read offline: the Kafka broker jars (`kafka-libs/`), Spark's Kafka connector
  (`spark-jars/`), and for the peers benchmark only the Cassandra server (`cassandra-libs/`,
  `make setup-peers`).
- `WAITLINE_STATE_DIR` (default `./.waitline`): what the local stack and the jobs write: service
  data and logs, the connection file `stack.json`, Spark checkpoints.

Read when called, not at import, so a test or a command can set the environment first.
"""

from __future__ import annotations

import os
from pathlib import Path

CACHE_DIR_ENV = "WAITLINE_CACHE_DIR"
STATE_DIR_ENV = "WAITLINE_STATE_DIR"
REPO_ROOT = Path(__file__).resolve().parents[1]


def cache_dir() -> Path:
    """`$WAITLINE_CACHE_DIR`, else `<repo>/.cache`."""
    return Path(os.environ.get(CACHE_DIR_ENV, REPO_ROOT / ".cache")).resolve()


def state_dir() -> Path:
    """`$WAITLINE_STATE_DIR`, else `./.waitline`: the local stack's state (data, logs,
    connection file) and the jobs' checkpoints."""
    return Path(os.environ.get(STATE_DIR_ENV, ".waitline")).resolve()


def kafka_libs_dir() -> Path:
    """The Apache Kafka broker jars the local stack runs."""
    return cache_dir() / "kafka-libs"


def spark_jars_dir() -> Path:
    """Spark's Kafka connector and its dependencies."""
    return cache_dir() / "spark-jars"


def cassandra_libs_dir() -> Path:
    """The Apache Cassandra server jars (the peers benchmark's prosody-events keeps its state
    there; `make setup-peers`)."""
    return cache_dir() / "cassandra-libs"
