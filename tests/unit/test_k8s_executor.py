"""The executor pods' entry point (spark_jobs/k8s_executor.py): the JVM command it builds from
the environment Spark's driver gives an executor pod, as Spark's own image entry point does."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from spark_jobs.k8s_executor import BACKEND, REQUIRED, USAGE_EXIT_CODE, executor_command

pytestmark = pytest.mark.unit

POD_ENV = {"SPARK_DRIVER_URL": "spark://CoarseGrainedScheduler@driver.ns.svc:7078",
           "SPARK_EXECUTOR_ID": "3", "SPARK_EXECUTOR_CORES": "2",
           "SPARK_APPLICATION_ID": "spark-abc", "SPARK_EXECUTOR_POD_IP": "10.0.0.7",
           "SPARK_RESOURCE_PROFILE_ID": "0", "SPARK_EXECUTOR_POD_NAME": "wl-exec-3",
           "SPARK_EXECUTOR_MEMORY": "2048m", "SPARK_CONF_DIR": "/opt/spark/conf",
           "SPARK_CLASSPATH": "/opt/waitline/cache/spark-jars/*"}


def test_the_command_is_the_backend_with_the_pods_settings() -> None:
    env = {**POD_ENV, "SPARK_JAVA_OPT_10": "-Dten", "SPARK_JAVA_OPT_2": "-Dtwo",
           "SPARK_JAVA_OPT_0": "-Dzero"}
    command = executor_command(env, java="/j/bin/java", home=Path("/py/pyspark"))
    backend = command.index(BACKEND)
    assert command[:backend] == [
        "/j/bin/java", "-Dzero", "-Dtwo", "-Dten", "-Xms2048m", "-Xmx2048m", "-cp",
        "/opt/spark/conf:/opt/waitline/cache/spark-jars/*:/py/pyspark/jars/*"]
    flags = dict(zip(command[backend + 1::2], command[backend + 2::2], strict=True))
    assert flags == {flag: env[name] for name, flag in REQUIRED.items()}


def test_a_variable_missing_stops_it_with_one_line() -> None:
    result = subprocess.run([sys.executable, "-m", "spark_jobs.k8s_executor", "executor"],
                            capture_output=True, text=True, timeout=60, env={"PATH": "/usr/bin"},
                            check=False)
    assert result.returncode == USAGE_EXIT_CODE
    assert result.stderr.count("\n") == 1
    assert "SPARK_DRIVER_URL" in result.stderr
