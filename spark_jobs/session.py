"""The SparkSession of the reconciliation job, with Spark's Kafka connector on its classpath.

Locally the job runs in `local[*]` and takes the Kafka connector's jars from
`$WAITLINE_CACHE_DIR/spark-jars`, which `make setup` fills from Maven Central
(compose/local/spark/pom.xml): nothing is downloaded at run time. Where that folder lacks the
connector (an installed wheel, a fresh machine), Spark resolves it by its Maven coordinates
(`spark.jars.packages`, into Ivy's cache under `~/.ivy2*`) instead; one log line says which.
Under spark-submit the cluster's own configuration (`--master`, `--jars`/`--packages`) wins and
`attach_session` only quiets the logs.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pyspark
import structlog
from pyspark.sql import SparkSession

from dispatcher.paths import spark_jars_dir
from spark_jobs.class_archive import SHARED_ARCHIVE_OPTION, archive_java_option
from spark_jobs.kafka_options import REDACTED_OPTIONS

CACHE_ENV = "WAITLINE_CACHE_DIR"
KAFKA_CONNECTOR_JAR_PREFIX = "spark-sql-kafka-0-10_"
# Scala 2.13: the only Scala build of Spark 4.
KAFKA_CONNECTOR_ARTIFACT = "org.apache.spark:spark-sql-kafka-0-10_2.13"
# The connector's dependencies pyspark/jars already holds, left out of a Maven resolution as
# compose/local/spark/pom.xml leaves them out: no second copy of a class shadows pyspark's, and
# Ivy never looks for them (it fails on a ~/.m2 holding a POM without its jar).
PYSPARK_SHIPPED = (
    "org.apache.spark:spark-tags_2.13", "org.apache.hadoop:hadoop-client-runtime",
    "org.apache.hadoop:hadoop-client-api", "org.scala-lang:scala-library",
    "org.scala-lang.modules:scala-parallel-collections_2.13",
    "com.google.code.findbugs:jsr305", "org.slf4j:slf4j-api", "org.xerial.snappy:snappy-java",
    "at.yawk.lz4:lz4-java", "org.lz4:lz4-java", "com.github.luben:zstd-jni",
)  # fmt: skip
APP_NAME = "waitline-reconcile"
DEFAULT_MASTER = "local[*]"
# A `--once` run is one cycle in a JVM that then exits: C1 alone compiles sooner, and the JVM
# never lives long enough for C2's code to pay for its compile time on a small box. Measured on
# 2 cores (docs/BENCHMARKS.md, "Spark's own floor for a first cycle"): a first cycle of 50,000
# events 22% faster; after ten cycles in one JVM, 15% slower than tiered compilation, so the
# long-running job keeps the JVM's default. The same JVM collects with the serial collector:
# G1's concurrent threads compete for the two cores a one-cycle JVM needs, and a first cycle of
# 50,000 events took 4.34 s on average against 4.68 s with G1 (five pairs, docs/BENCHMARKS.md,
# "Class-data sharing"); the long-running job keeps G1 for its shorter pauses.
ONCE_DRIVER_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
GATEWAY_PORT_ENV = "PYSPARK_GATEWAY_PORT"
REDACTION_OPTION = "spark.sql.redaction.options.regex"


def default_jars_dir() -> Path:
    """`$WAITLINE_CACHE_DIR/spark-jars`, the folder `make setup` fills."""
    return spark_jars_dir()


log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class SparkSettings:
    """How to start a local (or explicitly mastered) SparkSession for the job.

    The defaults suit a small box (2 cores, a few GiB to spare): few shuffle partitions, since
    a micro-batch is small and each partition is a task; no UI; WARN logs.
    """

    master: str = DEFAULT_MASTER
    jars_dir: Path = field(default_factory=default_jars_dir)
    spark_version: str = pyspark.__version__  # the connector's version must match Spark's
    shuffle_partitions: int = 4
    driver_memory: str = "2g"
    ui_enabled: bool = False
    log_level: str = "WARN"
    # The Python the executors run the mirror's writes in: this one, with the project and
    # psycopg installed (PYSPARK_PYTHON, when set, is Spark's own choice and wins).
    python: str = field(default_factory=lambda: os.environ.get("PYSPARK_PYTHON", sys.executable))
    # JVM options of the driver (in local mode, the executors' too); None: the JVM's defaults.
    driver_java_options: str | None = None
    extra_conf: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def for_job(cls, *, once: bool, master: str = DEFAULT_MASTER,
                class_archive: bool = True) -> SparkSettings:
        """The job's settings: a `--once` run's JVM compiles with C1 only; the JVM maps its
        classes from the class archive `make setup` built, while that archive is current
        (spark_jobs/class_archive.py; `class_archive=False` never does)."""
        jars_dir = default_jars_dir()
        archive = archive_java_option(jars_dir) if class_archive else None
        return cls(master=master, jars_dir=jars_dir,
                   driver_java_options=job_java_options(once=once, archive_option=archive))


def job_java_options(*, once: bool, archive_option: str | None) -> str | None:
    """The job's JVM options: C1 alone and the serial collector for `--once`, the class archive
    when there is one."""
    options = [option for option in (ONCE_DRIVER_JAVA_OPTIONS if once else None, archive_option)
               if option is not None]  # fmt: skip
    return " ".join(options) or None


@dataclass(frozen=True)
class Connector:
    """Where the session gets Spark's Kafka connector: its Spark settings and a log line."""

    conf: Mapping[str, str]
    description: str


def choose_connector(jars_dir: Path, spark_version: str) -> Connector:
    """The jars of `jars_dir` when it holds the connector, else its Maven coordinates."""
    jars = sorted(jars_dir.glob("*.jar")) if jars_dir.is_dir() else []
    if any(jar.name.startswith(KAFKA_CONNECTOR_JAR_PREFIX) for jar in jars):
        return Connector(
            conf={"spark.jars": ",".join(str(jar) for jar in jars),
                  # Also on the driver JVM's own class path (local mode: the executors' too),
                  # where the class archive can hold the connector's classes
                  # (spark_jobs/class_archive.py); `spark.jars` still ships them to a cluster.
                  "spark.driver.extraClassPath": ":".join(str(jar) for jar in jars)},
            description=f"Spark's Kafka connector: {len(jars)} local jars from {jars_dir}",
        )
    coordinates = f"{KAFKA_CONNECTOR_ARTIFACT}:{spark_version}"
    return Connector(
        conf={"spark.jars.packages": coordinates,
              "spark.jars.excludes": ",".join(PYSPARK_SHIPPED)},
        description=(
            f"Spark's Kafka connector: {KAFKA_CONNECTOR_JAR_PREFIX}*.jar is not in {jars_dir}; "
            f"resolving {coordinates} from Maven (spark.jars.packages). `make setup` or "
            f"{CACHE_ENV} pointing at a cache with spark-jars/ avoids the download"
        ),
    )


def session_conf(settings: SparkSettings, connector: Connector) -> dict[str, str]:
    """The Spark configuration `build_session` applies: pure, so it can be checked without a JVM."""
    conf = {
        "spark.master": settings.master,
        "spark.app.name": APP_NAME,
        "spark.driver.memory": settings.driver_memory,
        "spark.sql.shuffle.partitions": str(settings.shuffle_partitions),
        "spark.default.parallelism": str(settings.shuffle_partitions),
        "spark.ui.enabled": str(settings.ui_enabled).lower(),
        "spark.ui.showConsoleProgress": "false",
        "spark.log.level": settings.log_level,
        "spark.pyspark.python": settings.python,
        # Timestamps (Kafka record times, expiry times) are read and logged in UTC.
        "spark.sql.session.timeZone": "UTC",
        # Streaming queries disable adaptive execution anyway (with a warning per query), and
        # the job's batch work (DLQ writes) is too small to gain from it.
        "spark.sql.adaptive.enabled": "false",
        # The job's own checkpoint is its state; Spark's temp checkpoints are never needed.
        "spark.sql.streaming.forceDeleteTempCheckpointLocation": "true",
        # Kafka's credentials and keys are options of the job's sources and sinks.
        REDACTION_OPTION: REDACTED_OPTIONS,
    }
    if settings.driver_java_options is not None:
        conf["spark.driver.extraJavaOptions"] = settings.driver_java_options
    conf.update(connector.conf)
    conf.update(settings.extra_conf)
    return conf


def build_session(settings: SparkSettings | None = None) -> SparkSession:
    """Start (or reuse) the process's SparkSession with the Kafka connector on its classpath.

    Driver memory, JVM options and jars only take effect when this call starts the JVM; a
    session that already runs in the process is reused as it is, with the runtime settings
    re-applied.
    """
    settings = settings or SparkSettings()
    connector = choose_connector(settings.jars_dir, settings.spark_version)
    log.info(connector.description)
    if settings.driver_java_options and SHARED_ARCHIVE_OPTION in settings.driver_java_options:
        log.info("Spark's JVM maps its classes from the class archive `make setup` built")
    conf = session_conf(settings, connector)
    # PySpark starts its Python workers with $PYSPARK_PYTHON (python3 from PATH otherwise).
    os.environ.setdefault("PYSPARK_PYTHON", settings.python)
    builder = SparkSession.builder
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(conf["spark.log.level"])
    return spark


def launched_by_spark_submit() -> bool:
    """True when spark-submit started this Python driver (its JVM is already up)."""
    # spark-submit starts the JVM first and hands the driver its gateway port.
    return GATEWAY_PORT_ENV in os.environ


def attach_session(log_level: str = "WARN") -> SparkSession:
    """The session spark-submit configured (master, jars, memory come from the cluster)."""
    spark = SparkSession.builder.appName(APP_NAME).getOrCreate()
    spark.sparkContext.setLogLevel(log_level)
    spark.conf.set(REDACTION_OPTION, REDACTED_OPTIONS)
    return spark
