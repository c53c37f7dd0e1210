"""The images' build stage, run here without Docker: its COPY lines, applied to a folder of
their own (as Docker's build context, less what the .dockerignore leaves out), and its RUN line
(`uv build --wheel`, `uv export`) make the very wheel `uv build` makes from the checkout, the
same files byte for byte, and a lock-pinned, hashed requirements file holding every dependency
the wheel declares (offline: uv's cache from `make setup`)."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

from dispatcher.paths import spark_jars_dir
from spark_jobs.session import KAFKA_CONNECTOR_JAR_PREFIX

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
BUILD_TIMEOUT_S = 300


def build_stage(dockerfile: Path) -> tuple[list[str], str]:
    """The build stage's copied paths and its RUN command line."""
    text = re.sub(r"\\\n\s*", " ", dockerfile.read_text())
    stage = text.split("\nFROM ")[1]  # the first FROM starts the build stage
    copied = [word for line in re.findall(r"^COPY\s+(.+)$", stage, re.MULTILINE)
              for word in shlex.split(line)[:-1]]
    (run,) = [line for line in re.findall(r"^RUN\s+(.+)$", stage, re.MULTILINE)
              if "uv build" in line]
    return copied, run


def ignored(dockerfile: Path) -> list[str]:
    path = dockerfile.with_name(dockerfile.name + ".dockerignore")
    return [line.removeprefix("**/") for line in path.read_text().splitlines()
            if line.strip() and not line.startswith("#")]


def wheel_files(wheel: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(wheel) as archive:
        return {name: archive.read(name) for name in archive.namelist()
                if not name.endswith("/RECORD")}


@pytest.mark.parametrize("name", ["Dockerfile", "Dockerfile.reconcile"])
def test_the_build_stage_makes_the_wheel_uv_build_makes(name: str, tmp_path: Path) -> None:
    dockerfile = ROOT / "compose" / name
    copied, run = build_stage(dockerfile)
    context = tmp_path / "context"
    context.mkdir()
    skip = shutil.ignore_patterns(*ignored(dockerfile))
    for source in copied:
        if (ROOT / source).is_dir():
            shutil.copytree(ROOT / source, context / source, ignore=skip)
        else:
            shutil.copy2(ROOT / source, context / source)
    out = tmp_path / "dist"
    subprocess.run(["bash", "-c", run.replace("/dist", str(out))], cwd=context, check=True,
                   timeout=BUILD_TIMEOUT_S, capture_output=True)
    (image_wheel,) = out.glob("waitline-*.whl")

    checkout = tmp_path / "checkout"
    subprocess.run(["uv", "build", "--wheel", "--out-dir", str(checkout)], cwd=ROOT, check=True,
                   timeout=BUILD_TIMEOUT_S, capture_output=True)
    (wheel,) = checkout.glob("waitline-*.whl")
    assert image_wheel.name == wheel.name
    assert wheel_files(image_wheel) == wheel_files(wheel)

    metadata = next(v for k, v in wheel_files(wheel).items() if k.endswith("/METADATA"))
    needed = {re.split(r"[\s\[<>=!;~]", line.removeprefix("Requires-Dist: "))[0].lower()
              for line in metadata.decode().splitlines()
              if line.startswith("Requires-Dist: ") and "extra ==" not in line}
    requirements = (out / "requirements.txt").read_text()
    pinned = {m.lower().replace("_", "-")
              for m in re.findall(r"^([A-Za-z0-9_.-]+)==", requirements, re.MULTILINE)}
    assert {n.replace("_", "-") for n in needed} <= pinned
    assert "--hash=sha256:" in requirements
    entry_points = next(v for k, v in wheel_files(wheel).items()
                        if k.endswith("/entry_points.txt")).decode()
    assert "waitline = dispatcher.cli:main" in entry_points


def test_the_jars_stage_resolves_the_jars_make_setup_fetched(tmp_path: Path) -> None:
    """The reconcile image's `jars` stage, run here on a copy of what it COPYs: its Maven
    command yields the same jars as the folder `make setup` filled (offline, from Maven's local
    repository), so the image holds the connector the tests run with."""
    text = re.sub(r"\\\n\s*", " ", (ROOT / "compose" / "Dockerfile.reconcile").read_text())
    stage = next(part for part in text.split("\nFROM ") if part.split("\n", 1)[0].endswith(
        " AS jars"))
    (copy,) = re.findall(r"^COPY\s+(.+)$", stage, re.MULTILINE)
    source, target = shlex.split(copy)
    (run,) = re.findall(r"^RUN\s+(.+)$", stage, re.MULTILINE)
    shutil.copy2(ROOT / source, tmp_path / target)
    out = tmp_path / "jars"
    subprocess.run(["bash", "-c", run.replace("mvn ", "mvn -o ").replace("/jars", str(out))],
                   cwd=tmp_path, check=True, timeout=BUILD_TIMEOUT_S, capture_output=True)
    assert sorted(jar.name for jar in out.glob("*.jar")) == sorted(
        jar.name for jar in spark_jars_dir().glob("*.jar"))
    assert any(jar.name.startswith(KAFKA_CONNECTOR_JAR_PREFIX) for jar in out.glob("*.jar"))
