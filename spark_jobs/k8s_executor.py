"""The entry point of the reconciliation job's executor pods when Spark runs on Kubernetes
(`--master k8s://...`; the chart's `reconcile.master: k8s`).

Spark's driver starts each executor as a pod from its pod template, with the image's command
and one argument, `executor`, and says everything else in the pod's environment (the driver's
URL, the executor's id, cores and memory, the class path, `SPARK_JAVA_OPT_<n>`). Spark's own
images read that environment in their entry point script; the reconcile image runs `waitline`
instead, so the pod template runs this module, which turns the same environment into the same
JVM command (`KubernetesExecutorBackend` on the class path of the installed PySpark, Spark's
Kafka connector from the image's jar folder in `SPARK_CLASSPATH`) and execs it.

A variable missing (the module started by hand, a template not Spark's) exits 2 with one line
naming it.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import pyspark

BACKEND = "org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend"
JAVA_OPT_PREFIX = "SPARK_JAVA_OPT_"
# What the driver sets on every executor pod (BasicExecutorFeatureStep), with the backend's
# flag for each.
REQUIRED = {"SPARK_DRIVER_URL": "--driver-url", "SPARK_EXECUTOR_ID": "--executor-id",
            "SPARK_EXECUTOR_CORES": "--cores", "SPARK_APPLICATION_ID": "--app-id",
            "SPARK_EXECUTOR_POD_IP": "--hostname",
            "SPARK_RESOURCE_PROFILE_ID": "--resourceProfileId",
            "SPARK_EXECUTOR_POD_NAME": "--podName"}
USAGE_EXIT_CODE = 2


class MissingVariableError(KeyError):
    """The executor pod's environment lacks a variable Spark's driver sets."""


def spark_home() -> Path:
    """The installed PySpark: its `jars/` folder is Spark's class path."""
    return Path(pyspark.__file__).resolve().parent


def executor_command(env: Mapping[str, str], *, java: str, home: Path) -> list[str]:
    """The executor JVM's command line, as Spark's image entry point builds it from `env`."""
    missing = [name for name in (*REQUIRED, "SPARK_EXECUTOR_MEMORY") if not env.get(name)]
    if missing:
        raise MissingVariableError(", ".join(missing))
    options = [env[name] for name in sorted(
        (name for name in env if name.startswith(JAVA_OPT_PREFIX)),
        key=lambda name: int(name.removeprefix(JAVA_OPT_PREFIX) or 0))]
    classpath = ":".join(part for part in (
        env.get("SPARK_CONF_DIR"), env.get("SPARK_CLASSPATH"), f"{home / 'jars'}/*",
        env.get("SPARK_EXTRA_CLASSPATH")) if part)
    memory = env["SPARK_EXECUTOR_MEMORY"]
    flags = [word for name, flag in REQUIRED.items() for word in (flag, env[name])]
    return [java, *options, f"-Xms{memory}", f"-Xmx{memory}", "-cp", classpath, BACKEND, *flags]


def java_binary(env: Mapping[str, str]) -> str:
    """`$JAVA_HOME/bin/java`, else `java` on the PATH."""
    home = env.get("JAVA_HOME")
    if home and Path(home, "bin", "java").is_file():
        return str(Path(home, "bin", "java"))
    return shutil.which("java") or "java"


def main(argv: Sequence[str] | None = None) -> None:
    """Exec the executor JVM (`executor` is the one argument Spark passes; it is ignored)."""
    del argv
    env = dict(os.environ)
    try:
        command = executor_command(env, java=java_binary(env), home=spark_home())
    except MissingVariableError as exc:
        sys.stderr.write(f"error: not started by Spark's driver as an executor pod: "
                         f"{exc.args[0]} not set\n")
        raise SystemExit(USAGE_EXIT_CODE) from None
    os.execv(command[0], command)


if __name__ == "__main__":
    main(sys.argv[1:])
