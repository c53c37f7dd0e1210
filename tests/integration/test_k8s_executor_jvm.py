"""The executor pods' JVM, started for real from the command spark_jobs/k8s_executor.py builds:
Spark's Kubernetes executor backend is on the installed PySpark's class path, takes every flag
it is given, and goes on to reach the driver (here, an address where none listens: it reports
it cannot connect there, which it does only once its arguments parsed). A Kubernetes cluster is
not available here, so the executor never registers. Costs one JVM start (23 s measured on
this 2-core machine under a load average of 20)."""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from dispatcher.paths import spark_jars_dir
from dispatcher.ports import free_port
from spark_jobs.k8s_executor import executor_command, java_binary, spark_home

pytestmark = [pytest.mark.spark, pytest.mark.timeout(120)]


def test_the_executor_jvm_parses_its_flags_and_dials_the_driver() -> None:
    port = free_port()
    env = {"SPARK_DRIVER_URL": f"spark://CoarseGrainedScheduler@127.0.0.1:{port}",
           "SPARK_EXECUTOR_ID": "1", "SPARK_EXECUTOR_CORES": "1",
           "SPARK_APPLICATION_ID": "spark-waitline-test", "SPARK_EXECUTOR_POD_IP": "127.0.0.1",
           "SPARK_RESOURCE_PROFILE_ID": "0", "SPARK_EXECUTOR_POD_NAME": "wl-exec-1",
           "SPARK_EXECUTOR_MEMORY": "256m", "SPARK_JAVA_OPT_0": f"-Dspark.driver.port={port}",
           "SPARK_CLASSPATH": f"{spark_jars_dir()}/*"}
    command = executor_command(env, java=java_binary(os.environ), home=spark_home())
    seen: list[str] = []
    with subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          text=True) as process:
        assert process.stderr is not None
        try:
            deadline = time.monotonic() + 90
            while time.monotonic() < deadline:
                line = process.stderr.readline()
                if not line and process.poll() is not None:
                    break
                seen.append(line)
                if f"Failed to connect to /127.0.0.1:{port}" in line:
                    break
        finally:
            process.kill()
    output = "".join(seen)
    assert f"Failed to connect to /127.0.0.1:{port}" in output, output[-3000:]
    assert "Usage" not in output and "ClassNotFoundException" not in output
