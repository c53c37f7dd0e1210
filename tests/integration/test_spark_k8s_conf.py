"""The chart's Spark configuration for `reconcile.master: k8s`, read by Spark itself: the
spark-defaults.conf it mounts is what a PySpark driver started with that SPARK_CONF_DIR runs
with, and Spark's own template loader finds the executor container in the executor pod template
and keeps the command that starts spark_jobs/k8s_executor.py. No Kubernetes cluster here: the
driver runs in local mode and the template is only loaded. Costs one SparkSession start in a
process of its own (105 s measured on this shared 2-core machine under a load average of 25)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from chart_render import helm_render

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]

PROBE = r"""
import json, sys
from pyspark.sql import SparkSession
# The driver's address is the chart's Service, which resolves only in the cluster: here, loopback.
spark = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
         .config("spark.driver.host", "127.0.0.1").getOrCreate())
conf = dict(spark.sparkContext.getConf().getAll())
jvm = spark._jvm
client = jvm.io.fabric8.kubernetes.client.KubernetesClientBuilder().build()
name = jvm.scala.Option.apply(conf["spark.kubernetes.executor.podTemplateContainerName"])
loaded = jvm.org.apache.spark.deploy.k8s.KubernetesUtils.loadPodFromTemplate(
    client, sys.argv[1], name, spark.sparkContext._jsc.sc().conf())
container = loaded.container()
print(json.dumps({"conf": conf, "container": container.getName(),
                  "command": list(container.getCommand()),
                  "serviceAccount": loaded.pod().getSpec().getServiceAccountName(),
                  "readOnlyRoot": container.getSecurityContext().getReadOnlyRootFilesystem()}))
spark.stop()
"""


def test_spark_reads_the_driver_configuration_and_the_executor_template(tmp_path: Path) -> None:
    docs = helm_render("--namespace", "payments")
    (config_map,) = [doc for doc in docs if doc["kind"] == "ConfigMap"
                     and doc["metadata"]["name"].endswith("-spark-conf")]
    for name, text in config_map["data"].items():
        (tmp_path / name).write_text(text)
    expected = dict(line.split(None, 1) for line in
                    config_map["data"]["spark-defaults.conf"].splitlines() if line.strip())
    result = subprocess.run([sys.executable, "-c", PROBE, str(tmp_path / "executor-pod.yaml")],
                            capture_output=True, text=True, timeout=240, check=False,
                            env={**os.environ, "SPARK_CONF_DIR": str(tmp_path)})
    assert result.returncode == 0, result.stderr[-3000:]
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    driver_host = expected.pop("spark.driver.host")
    assert driver_host.endswith(".payments.svc")
    assert {key: seen["conf"].get(key) for key in expected} == expected
    assert seen["conf"]["spark.kubernetes.namespace"] == "payments"
    template = yaml.safe_load(config_map["data"]["executor-pod.yaml"])
    (container,) = template["spec"]["containers"]
    assert seen["container"] == container["name"] == "executor"
    assert seen["command"] == container["command"]
    assert seen["command"][-2:] == ["-m", "spark_jobs.k8s_executor"]
    assert seen["serviceAccount"] == expected[
        "spark.kubernetes.authenticate.executor.serviceAccountName"]
    assert seen["readOnlyRoot"] is True
