"""Where the Spark session takes Kafka's connector from: the local cache, else Maven."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

session = pytest.importorskip("spark_jobs.session")

pytestmark = pytest.mark.unit

CONNECTOR_JAR = "spark-sql-kafka-0-10_2.13-4.2.0.jar"
OTHER_JARS = ["kafka-clients-3.9.2.jar", "commons-pool2-2.13.1.jar",
              "spark-token-provider-kafka-0-10_2.13-4.0.0.jar"]  # fmt: skip


def _folder(root: Path, names: list[str]) -> Path:
    folder = root / "spark-jars"
    folder.mkdir()
    for name in names:
        (folder / name).write_bytes(b"")
    return folder


def test_a_cache_with_the_connector_puts_every_jar_on_spark_jars(tmp_path: Path) -> None:
    folder = _folder(tmp_path, [CONNECTOR_JAR, *OTHER_JARS, "README.txt"])
    connector = session.choose_connector(folder, "4.2.0")
    jars = [str(folder / n) for n in sorted([CONNECTOR_JAR, *OTHER_JARS])]
    # On the driver's class path too, where the class archive can hold their classes.
    assert dict(connector.conf) == {"spark.jars": ",".join(jars),
                                    "spark.driver.extraClassPath": ":".join(jars)}  # fmt: skip
    assert str(folder) in connector.description
    assert "local jars" in connector.description


@pytest.mark.parametrize(
    "names", [None, [], OTHER_JARS], ids=["no folder", "empty folder", "no connector"]
)
def test_a_cache_without_the_connector_resolves_it_by_maven_coordinates(
    tmp_path: Path, names: list[str] | None
) -> None:
    folder = tmp_path / "spark-jars" if names is None else _folder(tmp_path, names)
    connector = session.choose_connector(folder, "4.2.0")
    coordinates = "org.apache.spark:spark-sql-kafka-0-10_2.13:4.2.0"
    assert connector.conf["spark.jars.packages"] == coordinates
    excluded = connector.conf["spark.jars.excludes"].split(",")
    assert {"org.slf4j:slf4j-api", "org.apache.hadoop:hadoop-client-runtime"} <= set(excluded)
    assert all(len(coordinate.split(":")) == 2 for coordinate in excluded)
    assert coordinates in connector.description
    assert str(folder) in connector.description


def test_the_maven_version_is_the_installed_pyspark_version(tmp_path: Path) -> None:
    import pyspark

    settings = session.SparkSettings(jars_dir=tmp_path / "absent")
    connector = session.choose_connector(settings.jars_dir, settings.spark_version)
    assert connector.conf["spark.jars.packages"].endswith(f"_2.13:{pyspark.__version__}")


def test_the_session_conf_carries_the_connector_and_extra_conf_wins(tmp_path: Path) -> None:
    connector = session.choose_connector(tmp_path / "absent", "4.2.0")
    settings = session.SparkSettings(jars_dir=tmp_path, master="local[2]",
                                     extra_conf={"spark.ui.enabled": "true"})  # fmt: skip
    conf = session.session_conf(settings, connector)
    assert conf["spark.jars.packages"] == connector.conf["spark.jars.packages"]
    assert "spark.jars" not in conf
    assert (conf["spark.master"], conf["spark.ui.enabled"]) == ("local[2]", "true")



def test_only_a_once_run_starts_its_jvm_with_c1_and_the_serial_gc(tmp_path: Path) -> None:
    connector = session.choose_connector(tmp_path, "4.2.0")
    once = session.session_conf(
        session.SparkSettings.for_job(master="local[*]", once=True, class_archive=False),
        connector)  # fmt: skip
    assert once["spark.driver.extraJavaOptions"] == "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
    running = session.session_conf(
        session.SparkSettings.for_job(master="local[*]", once=False, class_archive=False),
        connector)  # fmt: skip
    assert "spark.driver.extraJavaOptions" not in running
    mine = session.SparkSettings(driver_java_options="-Xss4m",
                                 extra_conf={"spark.driver.extraJavaOptions": "-Xss8m"})
    assert session.session_conf(mine, connector)["spark.driver.extraJavaOptions"] == "-Xss8m"

def test_the_executors_run_the_drivers_python_unless_pyspark_python_says_otherwise(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    connector = session.choose_connector(tmp_path, "4.2.0")
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    assert session.session_conf(session.SparkSettings(), connector)["spark.pyspark.python"] == (
        sys.executable)
    monkeypatch.setenv("PYSPARK_PYTHON", "/opt/python3")
    assert session.session_conf(session.SparkSettings(), connector)["spark.pyspark.python"] == (
        "/opt/python3")


jar_names = st.lists(
    st.sampled_from([CONNECTOR_JAR, "spark-sql-kafka-0-10_2.12-3.5.1.jar", *OTHER_JARS,
                     "x.jar", "spark-sql-kafka-0-10_2.13-4.2.0.pom", "notes.txt"]),
    unique=True,
)  # fmt: skip


@given(names=jar_names, version=st.from_regex(r"[0-9]\.[0-9]{1,2}\.[0-9]{1,2}", fullmatch=True))
def test_local_jars_exactly_when_a_connector_jar_is_cached(
    tmp_path_factory: pytest.TempPathFactory, names: list[str], version: str
) -> None:
    folder = _folder(tmp_path_factory.mktemp("cache"), names)
    connector = session.choose_connector(folder, version)
    has_connector = any(n.startswith("spark-sql-kafka-0-10_") and n.endswith(".jar")
                        for n in names)  # fmt: skip
    if has_connector:
        listed = connector.conf["spark.jars"].split(",")
        assert listed == [str(folder / n) for n in sorted(n for n in names if n.endswith(".jar"))]
        assert connector.conf["spark.driver.extraClassPath"].split(":") == listed
        assert "spark.jars.packages" not in connector.conf
    else:
        assert connector.conf["spark.jars.packages"] == (
            f"org.apache.spark:spark-sql-kafka-0-10_2.13:{version}"
        )
        assert "spark.jars" not in connector.conf
        assert "spark.driver.extraClassPath" not in connector.conf
