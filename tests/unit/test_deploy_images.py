"""The two Dockerfiles, read statically (this machine has no Docker engine, so no image is built
or run here): each builds the wheel `uv build` makes from exactly what it copies, installs it
(with the lock's versions of its dependencies) into a fresh virtualenv, and runs `waitline` as a
numeric non-root user; every base image is pinned by digest and uv by its exact version, and
what the lock and the POMs say (Python, PySpark, the connector's Spark, the extras, Java's
major) agrees with what the images are built from. That the copied files suffice to build that
same wheel, and the jars stage resolves the connector: tests/integration/test_deploy_wheel.py."""

from __future__ import annotations

import re
import shlex
import tomllib
from pathlib import Path

import pytest

from dispatcher.paths import CACHE_DIR_ENV, spark_jars_dir

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILES = [ROOT / "compose" / "Dockerfile", ROOT / "compose" / "Dockerfile.reconcile"]


def instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) per instruction, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n\s*", " ", "\n".join(
        line for line in path.read_text().splitlines() if not line.lstrip().startswith("#")))
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1].strip())
            for line in text.splitlines() if line.strip()]


def stages(path: Path) -> list[list[tuple[str, str]]]:
    found: list[list[tuple[str, str]]] = []
    for instruction in instructions(path):
        if instruction[0] == "FROM":
            found.append([])
        found[-1].append(instruction)
    return found


def build_and_runtime(path: Path) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """The stage that builds the wheel (the first, `AS build`) and the image's (the last)."""
    all_stages = stages(path)
    assert all_stages[0][0][1].endswith(" AS build")
    return all_stages[0], all_stages[-1]


def named_stage(path: Path, name: str) -> list[tuple[str, str]]:
    (stage,) = [s for s in stages(path) if s[0][1].endswith(f" AS {name}")]
    return stage


def build_sources() -> set[str]:
    """What `uv build --wheel` reads: the project's metadata and every path the wheel takes."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    wheel = project["tool"]["hatch"]["build"]["targets"]["wheel"]
    return ({"pyproject.toml", "uv.lock", project["project"]["readme"]} | set(wheel["packages"])
            | set(wheel.get("force-include", {})))


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_the_build_stage_copies_what_the_wheel_is_built_from(dockerfile: Path) -> None:
    build, _runtime = build_and_runtime(dockerfile)
    copied = {word for name, args in build if name == "COPY"
              for word in shlex.split(args)[:-1]}
    assert copied == build_sources()
    runs = " && ".join(args for name, args in build if name == "RUN")
    assert "uv build --wheel --out-dir /dist" in runs
    assert "uv export --frozen --no-dev --no-emit-project" in runs


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_the_image_installs_that_wheel_and_nothing_of_the_checkout(dockerfile: Path) -> None:
    _build, runtime = build_and_runtime(dockerfile)
    copies = [args for name, args in runtime if name == "COPY"]
    assert "--from=build /dist /dist" in copies, "the image takes the wheel, not the sources"
    assert all(copy.startswith("--from=") for copy in copies), "nothing of the checkout"
    runs = " && ".join(args for name, args in runtime if name == "RUN")
    assert "pip install --no-cache-dir --require-hashes -r /dist/requirements.txt" in runs
    assert "pip install --no-cache-dir --no-deps /dist/waitline-*.whl" in runs


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_the_image_runs_waitline_as_a_numeric_non_root_user(dockerfile: Path) -> None:
    _build, runtime = build_and_runtime(dockerfile)
    users = [args for name, args in runtime if name == "USER"]
    assert users and users[-1].isdigit() and int(users[-1]) > 0, users
    runs = " && ".join(args for name, args in runtime if name == "RUN")
    assert f"useradd --system --uid {users[-1]}" in runs
    entry = [args for name, args in runtime if name == "ENTRYPOINT"]
    assert entry == ['["waitline"]']
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "waitline" in project["project"]["scripts"]


def test_the_reconcile_image_holds_the_connector_jars_where_the_job_looks() -> None:
    """Spark's Kafka connector is resolved at build time from the POM `make setup` uses, with
    the same Maven command, into the image's $WAITLINE_CACHE_DIR/spark-jars, the folder
    spark_jobs/session.py takes its jars from: a job in the image never fetches them."""
    dockerfile = ROOT / "compose" / "Dockerfile.reconcile"
    jars = named_stage(dockerfile, "jars")
    (copy,) = [args for name, args in jars if name == "COPY"]
    assert shlex.split(copy)[0] == "compose/local/spark/pom.xml"
    (run,) = [args for name, args in jars if name == "RUN"]
    setup = (ROOT / "compose" / "local" / "setup.sh").read_text()
    assert "dependency:copy-dependencies -DincludeScope=runtime" in run
    assert "dependency:copy-dependencies -DincludeScope=runtime" in setup
    output = re.search(r"-DoutputDirectory=(\S+)", run)
    assert output is not None
    _build, runtime = build_and_runtime(dockerfile)
    copies = dict(shlex.split(args.removeprefix("--from=jars "))
                  for name, args in runtime if name == "COPY" and args.startswith("--from=jars"))
    env = dict(arg.split("=", 1) for name, args in runtime if name == "ENV"
               for arg in shlex.split(args))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(CACHE_DIR_ENV, env[CACHE_DIR_ENV])
        assert copies[output.group(1)] == str(spark_jars_dir())


# --- pins, and the images against the lock ------------------------------------------------------

DIGEST = re.compile(r"^(?P<image>[a-z0-9./_-]+):(?P<tag>[\w.-]+)@sha256:[0-9a-f]{64}$")


def base_images(path: Path) -> list[str]:
    """Every image the file builds FROM or copies from (stages' own names aside)."""
    names = {args.split()[-1] for name, args in instructions(path)
             if name == "FROM" and " AS " in args}
    found = [args.split()[0] for name, args in instructions(path) if name == "FROM"]
    found += [args.split()[0].removeprefix("--from=") for name, args in instructions(path)
              if name == "COPY" and args.startswith("--from=")]
    return [image for image in found if image not in names]


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_every_base_image_is_pinned_by_digest(dockerfile: Path) -> None:
    images = base_images(dockerfile)
    assert images
    for image in images:
        match = DIGEST.match(image)
        assert match, f"{image}: pin it by digest (name:tag@sha256:...)"
        assert re.search(r"\d", match["tag"]), f"{image}: a tag naming a version"


def uv_pins() -> dict[str, str]:
    """The uv version each file installs."""
    pins = {}
    for path in DOCKERFILES:
        found = set(re.findall(r"'uv==([0-9][0-9.]*)'", path.read_text()))
        assert len(found) == 1, f"{path.name}: install uv by one exact version ('uv==X.Y.Z')"
        pins[path.name] = found.pop()
    setup = (ROOT / "compose" / "local" / "setup.sh").read_text()
    (pins["setup.sh"],) = re.findall(r"^UV_VERSION=([0-9][0-9.]*)$", setup, re.MULTILINE)
    assert '"uv==$UV_VERSION"' in setup
    return pins


def test_uv_is_the_same_exact_version_in_the_images_and_the_set_up() -> None:
    assert len(set(uv_pins().values())) == 1, uv_pins()


def lock_version(package: str) -> str:
    lock = tomllib.loads((ROOT / "uv.lock").read_text())
    (found,) = [p["version"] for p in lock["package"] if p["name"] == package]
    return str(found)


def test_the_images_python_is_one_the_lock_resolves_for() -> None:
    lock = tomllib.loads((ROOT / "uv.lock").read_text())
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    minimum = tuple(int(p) for p in re.findall(r"\d+", lock["requires-python"])[:2])
    assert project["requires-python"] == lock["requires-python"]
    for dockerfile in DOCKERFILES:
        for image in base_images(dockerfile):
            if image.startswith("python:"):
                version = re.match(r"python:(\d+)\.(\d+)\.(\d+)-", image)
                assert version, image
                assert (int(version[1]), int(version[2])) >= minimum


def test_the_extras_the_images_install_exist_and_hold_what_each_image_needs() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    wanted = {}
    for dockerfile in DOCKERFILES:
        build, _runtime = build_and_runtime(dockerfile)
        runs = " ".join(args for name, args in build if name == "RUN")
        wanted[dockerfile.name] = set(re.findall(r"--extra (\w+)", runs))
        assert wanted[dockerfile.name] <= set(extras), dockerfile.name
    assert "spark" in wanted["Dockerfile.reconcile"]
    assert "otel" in wanted["Dockerfile"], "the pod's traces"
    assert "spark" not in wanted["Dockerfile"], "the pod runs without PySpark"


def test_the_connector_the_image_bakes_is_for_the_locked_spark() -> None:
    pom = (ROOT / "compose" / "local" / "spark" / "pom.xml").read_text()
    spark = re.search(r"<spark.version>([^<]+)</spark.version>", pom)
    assert spark and spark[1] == lock_version("pyspark")


def test_the_images_java_is_the_major_the_set_up_and_spark_run_on() -> None:
    """Java 17: the JRE the reconcile image copies, the JDK its jars stage resolves with, and
    the runtime `make setup` installs for the tests; Spark 4 (the lock's) runs on 17 or 21."""
    images = base_images(ROOT / "compose" / "Dockerfile.reconcile")
    majors = {re.search(r"temurin[:-](\d+)", image)[1]  # type: ignore[index]
              for image in images if "temurin" in image}
    assert majors == {"17"}
    assert "openjdk-17-jre-headless" in (ROOT / "compose" / "local" / "setup.sh").read_text()
    assert int(lock_version("pyspark").split(".")[0]) == 4


def test_the_readme_names_every_package_and_version_the_set_up_needs() -> None:
    """README's "Set-up" lists what `make setup` installs from Debian and the Go and helm
    versions it fetches, so a newcomer knows what it will ask for."""
    setup = (ROOT / "compose" / "local" / "setup.sh").read_text()
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("### Set-up"):readme.index("### What the test commands run")]
    packages = set(re.findall(r"missing\+=\(([a-z0-9.-]+)\)", setup))
    assert {"maven", "postgresql", "openjdk-17-jre-headless", "python3-venv"} <= packages
    for package in packages:
        assert f"`{package}`" in section, f"README's Set-up does not name {package}"
    (go_minimum,) = re.findall(r"GO_MINIMUM=([0-9.]+)", setup)
    (helm,) = re.findall(r"HELM_VERSION=v([0-9]+\.[0-9]+)\.[0-9]+", setup)
    assert f"Go {go_minimum}" in section and f"helm v{helm}" in section
