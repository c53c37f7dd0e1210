"""The reconciliation job on a real Spark cluster: a standalone master and worker of the dev stack
(`waitline dev up --spark`), the job submitted with spark-submit in client mode, the Kafka
connector's jars shipped from `.cache/`, the mirror's writes made on the worker's executor."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from reconcile_helpers import WaitTopic, service_of_its_own

from devstack.spark import SparkClusterService, SparkPorts, spark_home
from dispatcher.paths import REPO_ROOT, spark_jars_dir
from dispatcher.ports import free_ports
from dispatcher.wire import OutgoingRecord, parse_dlq_record

pytestmark = [pytest.mark.spark, pytest.mark.timeout(400)]


@pytest.fixture(scope="module")
def cluster() -> Iterator[SparkClusterService]:
    with service_of_its_own(lambda home: SparkClusterService(
            home, SparkPorts(*free_ports(3)), worker_cores=2, worker_memory="1g"),
            "waitline-spark-") as service:
        yield service


def spark_submit(
    cluster: SparkClusterService, waits: WaitTopic
) -> subprocess.CompletedProcess[str]:
    jars = ",".join(str(jar) for jar in sorted(spark_jars_dir().glob("*.jar")))
    config = waits.config()
    return subprocess.run(
        [str(spark_home() / "bin" / "spark-submit"), "--master", cluster.master_url,
         "--deploy-mode", "client", "--jars", jars,
         "--conf", f"spark.pyspark.python={sys.executable}",
         "--conf", "spark.driver.host=127.0.0.1", "--conf", "spark.executor.memory=1g",
         "--conf", "spark.sql.shuffle.partitions=2",
         str(REPO_ROOT / "spark_jobs" / "app.py"),
         "--group", config.group, "--once", "--bootstrap-servers", config.bootstrap_servers,
         "--dsn", config.pg_dsn, "--checkpoint", config.checkpoint_dir],
        capture_output=True, text=True, timeout=300, check=False, cwd=tempfile.gettempdir(),
        env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"},
    )  # fmt: skip


def test_spark_submit_to_a_standalone_cluster_mirrors_and_expires_on_its_executors(
    cluster: SparkClusterService, waits: WaitTopic
) -> None:
    past = (datetime.now(UTC) - timedelta(minutes=5)).replace(microsecond=0)
    expired = [waits.source(offset) for offset in range(4)]
    closed, not_due = waits.source(10), waits.source(11)
    # A record the sink rejects: its log line comes from where the sink runs.
    unreadable = OutgoingRecord(key=b"not-a-wait-id", value=b"{}", headers=())
    waits.produce([*(waits.prepare(s, past) for s in expired), waits.prepare(closed, past),
                   waits.close(closed, past), waits.prepare(not_due), unreadable])  # fmt: skip

    submitted = spark_submit(cluster, waits)

    assert submitted.returncode == 0, submitted.stderr[-3000:]
    dlq = [parse_dlq_record(k, v, h) for k, v, h in waits.dlq_records()]
    assert sorted(d.source.offset for d in dlq) == [s.offset for s in expired]
    # Closed by the sweep's tombstones once mirrored; the due-later wait stays open.
    assert waits.wait_id(not_due) in waits.open_wait_ids()
    apps = [app for app in cluster.applications() if app.get("name") == "waitline-reconcile"]
    assert apps, "the job did not run as an application of the cluster"
    executor_logs = "".join(path.read_text(errors="replace")
                            for path in (cluster.home / "work").glob("app-*/*/stderr"))  # fmt: skip
    assert "wait records rejected" in executor_logs, "the sink did not run on the executor"
    assert "wait records rejected" not in submitted.stdout + submitted.stderr
