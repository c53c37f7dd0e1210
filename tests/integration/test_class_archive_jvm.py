"""The class archive on a real JVM: `python -m devstack.class_archive` builds it with no
service running, and a JVM started with it maps Spark's and the Kafka connector's classes from
it instead of loading them from the jars."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from dispatcher.paths import REPO_ROOT
from spark_jobs.class_archive import archive_dir

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(400)]

# Starts a JVM as the job would with the archive in `argv[1]`, logging where each class came
# from to `argv[2]`, and has it load the Kafka connector's source.
USE_ARCHIVE = """
import sys
from dataclasses import replace
from spark_jobs.class_archive import archive_java_option
from spark_jobs.session import SparkSettings, build_session, default_jars_dir
from pathlib import Path
option = archive_java_option(default_jars_dir(), Path(sys.argv[1]))
assert option is not None, "the archive just built is not offered"
settings = SparkSettings.for_job(once=True, class_archive=False)
spark = build_session(replace(settings, driver_java_options=(
    f"{settings.driver_java_options} {option} -Xlog:class+load=info:file={sys.argv[2]}")))
spark.read.format("kafka").option("kafka.bootstrap.servers", "127.0.0.1:1") \\
    .option("subscribe", "t").load().schema
spark.stop()
"""


def _run(args: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
                          check=False)  # fmt: skip


@pytest.mark.extended  # a second build of ~35 s quiet, 2-3 min under CI's load
def test_a_built_archive_serves_spark_and_connector_classes(tmp_path: Path) -> None:
    """From nothing, in a folder of its own."""
    _check_builds_and_serves(tmp_path / "cds", tmp_path)


def test_the_archive_make_setup_built_serves_spark_and_connector_classes(
        tmp_path: Path) -> None:
    """The archive in the cache, as `make setup` left it (built now if it did not): the one
    every job of this run maps."""
    _check_builds_and_serves(None, tmp_path)


def _check_builds_and_serves(directory: Path | None, tmp_path: Path) -> None:
    where = [] if directory is None else ["--dir", str(directory)]
    built = _run(["-m", "devstack.class_archive", *where, "--if-stale"])
    assert built.returncode == 0, built.stderr[-3000:]
    assert "Spark class archive:" in built.stdout
    cds = directory or archive_dir()
    assert sorted(p.name for p in cds.iterdir()) == [
        "reconcile.jsa", "reconcile.stamp.json"]  # the training's files are gone

    again = _run(["-m", "devstack.class_archive", *where, "--if-stale"])
    assert again.returncode == 0
    assert "current" in again.stdout

    loads = tmp_path / "class-load.log"
    used = _run(["-c", USE_ARCHIVE, str(cds), str(loads)])
    assert used.returncode == 0, used.stderr[-3000:]
    sources = {line.split()[1]: line for line in loads.read_text().splitlines()
               if "[class,load]" in line}  # fmt: skip
    # "top": the dynamic archive layered over the JDK's own.
    for name in ("org.apache.spark.SparkContext",
                 "org.apache.spark.sql.catalyst.analysis.Analyzer",
                 "org.apache.spark.sql.kafka010.KafkaSourceProvider"):
        assert "source: shared objects file (top)" in sources[name], sources.get(name)


def test_a_session_already_in_the_process_is_refused(tmp_path: Path) -> None:
    script = ("from spark_jobs.session import build_session, SparkSettings\n"
              "from devstack.class_archive import build_class_archive, ClassArchiveError\n"
              "from pathlib import Path\nimport sys\n"
              "spark = build_session(SparkSettings(master='local[1]'))\n"
              "try:\n    build_class_archive(directory=Path(sys.argv[1]))\n"
              "except ClassArchiveError as exc:\n    print('refused:', exc)\n"
              "spark.stop()\n")  # fmt: skip
    result = _run(["-c", script, str(tmp_path / "cds")])
    assert result.returncode == 0, result.stderr[-3000:]
    assert "refused: a SparkSession already runs in this process" in result.stdout
    assert not (tmp_path / "cds" / "reconcile.jsa").exists()
