"""The class archive of the job's JVM: when it is offered, what the JVM options become, and the
wait records it trains on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

class_archive = pytest.importorskip("spark_jobs.class_archive")
training = pytest.importorskip("devstack.class_archive")
session = pytest.importorskip("spark_jobs.session")

from connectors.rows import WaitEvent, plan_batch  # noqa: E402

pytestmark = pytest.mark.unit

C1 = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def _archive(directory: Path, jars_dir: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / class_archive.ARCHIVE_NAME).write_bytes(b"archive")
    stamp = class_archive.archive_stamp(jars_dir)
    (directory / class_archive.STAMP_NAME).write_text(json.dumps(stamp))
    return directory / class_archive.ARCHIVE_NAME


@pytest.mark.parametrize(("once", "archive", "expected"), [
    (True, None, C1),
    (False, None, None),
    (True, "-XX:SharedArchiveFile=/a.jsa", f"{C1} -XX:SharedArchiveFile=/a.jsa"),
    (False, "-XX:SharedArchiveFile=/a.jsa", "-XX:SharedArchiveFile=/a.jsa"),
])  # fmt: skip
def test_the_jobs_jvm_options(once: bool, archive: str | None, expected: str | None) -> None:
    assert session.job_java_options(once=once, archive_option=archive) == expected


def test_a_current_archive_is_offered(tmp_path: Path) -> None:
    jars = tmp_path / "spark-jars"
    jars.mkdir()
    archive = _archive(tmp_path / "cds", jars)
    option = class_archive.archive_java_option(jars, tmp_path / "cds")
    assert option == f"-XX:SharedArchiveFile={archive}"


def test_no_archive_no_stamp_or_a_broken_stamp_is_no_option(tmp_path: Path) -> None:
    jars, cds = tmp_path / "spark-jars", tmp_path / "cds"
    assert class_archive.archive_java_option(jars, cds) is None  # nothing built
    _archive(cds, jars)
    (cds / class_archive.ARCHIVE_NAME).unlink()
    assert class_archive.archive_java_option(jars, cds) is None  # a stamp alone
    _archive(cds, jars)
    (cds / class_archive.STAMP_NAME).write_text("{not json")
    assert class_archive.archive_java_option(jars, cds) is None


@pytest.mark.parametrize("change", ["pyspark", "jvm", "java"])
def test_an_archive_made_with_another_spark_or_jvm_is_not_offered(
    tmp_path: Path, change: str
) -> None:
    jars, cds = tmp_path / "spark-jars", tmp_path / "cds"
    _archive(cds, jars)
    stamp = json.loads((cds / class_archive.STAMP_NAME).read_text())
    stamp[change] = f"another {change}"
    (cds / class_archive.STAMP_NAME).write_text(json.dumps(stamp))
    assert class_archive.archive_java_option(jars, cds) is None


def test_other_connector_jars_make_the_archive_stale(tmp_path: Path) -> None:
    jars, cds = tmp_path / "spark-jars", tmp_path / "cds"
    jars.mkdir()
    (jars / "kafka-clients-3.9.2.jar").write_bytes(b"")
    _archive(cds, jars)
    assert class_archive.archive_java_option(jars, cds) is not None
    (jars / "kafka-clients-3.9.2.jar").rename(jars / "kafka-clients-4.0.0.jar")
    assert class_archive.archive_java_option(jars, cds) is None


def test_the_stamp_names_the_jvm_java_home_points_at(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "jdk"
    (home / "bin").mkdir(parents=True)
    (home / "bin" / "java").write_bytes(b"")
    (home / "lib" / "server").mkdir(parents=True)
    (home / "lib" / "server" / "libjvm.so").write_bytes(b"x" * 7)
    monkeypatch.setenv("JAVA_HOME", str(home))
    stamp = class_archive.archive_stamp(tmp_path / "absent")
    assert stamp["java"] == str((home / "bin" / "java").resolve())
    assert stamp["jvm"].startswith(f"{home / 'lib' / 'server' / 'libjvm.so'}:7:")


def test_no_java_no_stamped_jvm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "no-jdk"))
    assert class_archive.archive_stamp(tmp_path)["java"] is None
    assert class_archive.archive_stamp(tmp_path)["jvm"] is None


def test_the_training_records_are_the_dispatchers_and_all_accepted() -> None:
    rows = list(training.training_rows(200))
    events = [WaitEvent(wait_topic=topic, partition=partition, offset=offset, key=key,
                        value=value, headers=tuple(headers), timestamp_ms=0)
              for key, value, topic, partition, offset, _ts, _type, headers in rows]  # fmt: skip
    plan = plan_batch(events, dlq_topic="waitline-cds.dlq", group=None)
    assert plan.rejects == ()
    prepares = [e for e in events if e.value is not None]
    tombstones = [e for e in events if e.value is None]
    assert len(prepares) == 100
    assert len(tombstones) == 95  # one prepare in 20 stays open
    assert {t.key for t in tombstones} <= {p.key for p in prepares}


def test_the_stamp_names_where_pyspark_and_the_connector_jars_are(tmp_path: Path) -> None:
    """Another virtualenv or cache has another class path, which the archive does not fit."""
    import pyspark

    one, other = tmp_path / "one", tmp_path / "other"
    for folder in (one, other):
        folder.mkdir()
        (folder / "kafka-clients-3.9.2.jar").write_bytes(b"")
    assert class_archive.archive_stamp(one)["jars"] != class_archive.archive_stamp(other)["jars"]
    assert str(Path(pyspark.__file__).resolve().parent) in class_archive.archive_stamp(one)[
        "pyspark"]


def test_a_build_clears_what_a_killed_build_left_and_waits_for_one_running(
        tmp_path: Path) -> None:
    """A build killed mid-training (a timeout, Ctrl-C twice) leaves its `.training-*` folder,
    up to the size of an archive (~180 MB); the next build removes it. Two builds into one
    folder take turns: the second waits for the first's lock, so it never removes the first's
    folder while the first writes there."""
    import fcntl
    import os
    left = tmp_path / ".training-killed"
    (left / "nested").mkdir(parents=True)
    (left / "nested" / "reconcile.jsa").write_bytes(b"half an archive")
    (tmp_path / class_archive.ARCHIVE_NAME).write_bytes(b"archive")
    with training.building_alone(tmp_path):
        assert not left.exists()
        assert (tmp_path / class_archive.ARCHIVE_NAME).exists()
        held = os.open(tmp_path, os.O_RDONLY)
        try:
            with pytest.raises(BlockingIOError):
                fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        finally:
            os.close(held)
    free = os.open(tmp_path, os.O_RDONLY)
    try:
        fcntl.flock(free, fcntl.LOCK_EX | fcntl.LOCK_NB)  # released at the end
    finally:
        os.close(free)
