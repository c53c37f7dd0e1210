"""One resolver for Waitline's path settings (WAITLINE_CACHE_DIR, WAITLINE_STATE_DIR)."""

from __future__ import annotations

from pathlib import Path

import pytest

from devstack.kafka import KafkaService
from dispatcher import paths
from dispatcher.endpoints import connection_file

pytestmark = pytest.mark.unit


def test_paths_follow_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(paths.CACHE_DIR_ENV, str(tmp_path / "cache"))
    monkeypatch.setenv(paths.STATE_DIR_ENV, str(tmp_path / "state"))
    assert paths.kafka_libs_dir() == tmp_path / "cache" / "kafka-libs"
    assert paths.spark_jars_dir() == tmp_path / "cache" / "spark-jars"
    assert connection_file() == tmp_path / "state" / "stack.json"
    assert KafkaService(tmp_path / "k", 1, 2).libs_dir == tmp_path / "cache" / "kafka-libs"


def test_defaults_are_the_repo_cache_and_a_local_state_folder(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv(paths.CACHE_DIR_ENV, raising=False)
    monkeypatch.delenv(paths.STATE_DIR_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    assert paths.cache_dir() == paths.REPO_ROOT / ".cache"
    assert paths.state_dir() == tmp_path.resolve() / ".waitline"


def test_the_spark_job_takes_its_jars_from_the_same_cache(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    session = pytest.importorskip("spark_jobs.session")
    monkeypatch.setenv(paths.CACHE_DIR_ENV, str(tmp_path))
    assert session.default_jars_dir() == tmp_path / "spark-jars"
