"""The wheel, installed into a clean virtualenv outside the repository, runs for real.

`uv build` makes the wheel; a fresh virtualenv under a temporary folder gets it with the locked
dependencies (`uv export`, from uv's cache: no network once `make setup` ran); every command
then runs from a folder outside the checkout with only the environment an operator would set,
so nothing can be imported from, or read out of, the repository. The registry schema comes from
the wheel's `connectors/sql`; the reconciliation job mirrors a real wait topic into a fresh
database and expires a due wait to the DLQ.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest
from aiokafka import AIOKafkaProducer
from dispatch_helpers import create_topic, read_dlq
from psycopg import sql
from psycopg.conninfo import make_conninfo

from dispatcher.paths import cache_dir
from dispatcher.wire import OutgoingRecord, SourceRecord, wait_id_for, wait_record

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.slow]

REPO_ROOT = Path(__file__).resolve().parents[2]
INSTALL_TIMEOUT_S = 600
RECONCILE_TIMEOUT_S = 600


@dataclass(frozen=True)
class Installed:
    """A virtualenv holding the built wheel, and a folder outside the repository to run in."""

    venv: Path
    outside: Path
    env: dict[str, str]

    def run(self, *args: str, timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
        result = subprocess.run([str(self.venv / "bin" / "waitline"), *args], cwd=self.outside,
                                env=self.env, capture_output=True, text=True, timeout=timeout_s,
                                check=False)  # fmt: skip
        assert result.returncode == 0, (
            f"waitline {' '.join(args)} exited {result.returncode}:\n{result.stderr[-4000:]}"
        )
        return result


def _uv(*args: str, cwd: Path, timeout_s: float = INSTALL_TIMEOUT_S) -> None:
    uv = shutil.which("uv")
    assert uv is not None, ("uv is not on PATH (make setup installs it, under the cache when "
                            "the machine has none; make test puts that one on the PATH)")
    # Offline: the build backend and every locked dependency are in uv's cache after setup.
    env = {**os.environ, "UV_OFFLINE": "1", "UV_PYTHON_DOWNLOADS": "never"}
    env.pop("VIRTUAL_ENV", None)
    result = subprocess.run([uv, *args], cwd=cwd, env=env, capture_output=True, text=True,
                            timeout=timeout_s, check=False)  # fmt: skip
    assert result.returncode == 0, f"uv {' '.join(args)} failed:\n{result.stderr[-4000:]}"


def _base_python() -> str:
    """The interpreter the project's virtualenv was made from (not the virtualenv itself)."""
    return str(Path(sys.base_prefix) / "bin" / f"python{sys.version_info[0]}.{sys.version_info[1]}")


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    home = tmp_path_factory.mktemp("installed")
    assert REPO_ROOT not in home.parents, "the virtualenv must live outside the repository"
    dist, venv, outside = home / "dist", home / "venv", home / "outside"
    outside.mkdir()
    _uv("build", "--wheel", "--out-dir", str(dist), cwd=REPO_ROOT)
    wheels = sorted(dist.glob("waitline-*.whl"))
    assert len(wheels) == 1, f"expected one wheel in {dist}: {wheels}"
    # The locked versions, by wheel URL (pylock.toml): read from uv's cache, no index needed.
    lock = home / "pylock.toml"
    _uv("export", "--frozen", "--extra", "spark", "--no-emit-project", "--format", "pylock.toml",
        "--quiet", "--output-file", str(lock), cwd=REPO_ROOT)  # fmt: skip
    _uv("venv", "--quiet", "--python", _base_python(), str(venv), cwd=home)
    python = str(venv / "bin" / "python")
    _uv("pip", "install", "--python", python, "-r", str(lock), cwd=home)
    _uv("pip", "install", "--python", python, "--no-deps", str(wheels[0]), cwd=home)
    # The wheel's own requirements are met by what the lock installed.
    _uv("pip", "check", "--python", python, cwd=home)
    env = {
        "PATH": os.environ["PATH"],
        "HOME": os.environ.get("HOME", str(home)),
        # Where `make setup` put Spark's Kafka connector; the wheel finds it there.
        "WAITLINE_CACHE_DIR": str(cache_dir()),
        "WAITLINE_STATE_DIR": str(home / "state"),
    }
    if "JAVA_HOME" in os.environ:
        env["JAVA_HOME"] = os.environ["JAVA_HOME"]
    return Installed(venv=venv, outside=outside, env=env)


def test_the_installed_modules_come_from_the_virtualenv_not_the_checkout(
    installed: Installed,
) -> None:
    probe = ("import connectors, dispatcher, loadtest, spark_jobs\n"
             "from connectors.migrate import load_migrations\n"
             "for m in (connectors, dispatcher, loadtest, spark_jobs): print(m.__file__)\n"
             "print(len(load_migrations()))")  # fmt: skip
    result = subprocess.run([str(installed.venv / "bin" / "python"), "-c", probe],
                            cwd=installed.outside, env=installed.env, capture_output=True,
                            text=True, timeout=60, check=True)  # fmt: skip
    *files, migrations = result.stdout.split()
    assert all(Path(f).is_relative_to(installed.venv) for f in files), files
    assert int(migrations) == len(list((REPO_ROOT / "sql").glob("*.sql")))


def test_help_of_the_installed_commands(installed: Installed) -> None:
    assert "dispatch" in installed.run("--help").stdout
    assert "--input-topic" in installed.run("dispatch", "--help").stdout
    assert "--once" in installed.run("reconcile", "--help").stdout


def test_installed_reconcile_once_mirrors_and_expires_against_the_stack(
    installed: Installed, kafka_bootstrap: str, pg_dsn: str, unique_name: Callable[[str], str]
) -> None:
    group = unique_name("installed")
    database = group.replace("-", "_")
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(database)))
    dsn = make_conninfo(pg_dsn, dbname=database)
    env = {**installed.env, "WAITLINE_BOOTSTRAP_SERVERS": kafka_bootstrap, "WAITLINE_PG_DSN": dsn}
    runner = Installed(installed.venv, installed.outside, env)

    # A fresh database gets its schema from the files shipped in the wheel.
    assert "applied: 001_" in runner.run("registry", "migrate").stdout

    wait_topic, dlq_topic = f"{group}.wait", f"{group}.dlq"
    asyncio.run(create_topic(kafka_bootstrap, wait_topic, configs={"cleanup.policy": "compact"}))
    asyncio.run(create_topic(kafka_bootstrap, dlq_topic, partitions=1))
    now = datetime.now(UTC)
    due = _source(0)
    not_due = _source(1)
    asyncio.run(_produce(kafka_bootstrap, wait_topic, [
        wait_record(due, group, now - timedelta(seconds=1)),
        wait_record(not_due, group, now + timedelta(hours=1)),
    ]))  # fmt: skip

    runner.run("reconcile", "--group", group, "--once", "--master", "local[1]",
               timeout_s=RECONCILE_TIMEOUT_S)

    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT wait_id, dlq_sent_at IS NOT NULL FROM wait").fetchall()
    assert dict(rows) == {_wait_id(group, due): True, _wait_id(group, not_due): False}
    dlq = asyncio.run(read_dlq(kafka_bootstrap, dlq_topic))
    assert [entry.wait_id for entry in dlq] == [_wait_id(group, due)]
    assert dlq[0].source == due


def _source(offset: int) -> SourceRecord:
    return SourceRecord(topic="orders", partition=0, offset=offset, key=b"k%d" % offset,
                        value=b'{"amount": %d}' % offset, headers=(),
                        timestamp_ms=1_700_000_000_000 + offset)


def _wait_id(group: str, source: SourceRecord) -> uuid.UUID:
    return wait_id_for(group, source.topic, source.partition, source.offset)


async def _produce(bootstrap: str, topic: str, records: list[OutgoingRecord]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    try:
        for record in records:
            await producer.send_and_wait(topic, record.value, key=record.key,
                                         headers=list(record.headers))
    finally:
        await producer.stop()
