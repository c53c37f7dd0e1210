"""The two Dockerfiles, read statically (this machine has no Docker engine): each builds the
wheel `uv build` makes from exactly what it copies, installs it (with the lock's versions of its
dependencies) into a fresh virtualenv, and runs `waitline` as a numeric non-root user. That the
copied files suffice to build that same wheel: tests/integration/test_deploy_wheel.py."""

from __future__ import annotations

import re
import shlex
import tomllib
from pathlib import Path

import pytest

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


def build_sources() -> set[str]:
    """What `uv build --wheel` reads: the project's metadata and every path the wheel takes."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    wheel = project["tool"]["hatch"]["build"]["targets"]["wheel"]
    return ({"pyproject.toml", "uv.lock", project["project"]["readme"]} | set(wheel["packages"])
            | set(wheel.get("force-include", {})))


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_the_build_stage_copies_what_the_wheel_is_built_from(dockerfile: Path) -> None:
    build, _runtime = stages(dockerfile)
    copied = {word for name, args in build if name == "COPY"
              for word in shlex.split(args)[:-1]}
    assert copied == build_sources()
    runs = " && ".join(args for name, args in build if name == "RUN")
    assert "uv build --wheel --out-dir /dist" in runs
    assert "uv export --frozen --no-dev --no-emit-project" in runs


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_the_image_installs_that_wheel_and_nothing_of_the_checkout(dockerfile: Path) -> None:
    _build, runtime = stages(dockerfile)
    copies = [args for name, args in runtime if name == "COPY"]
    assert copies == ["--from=build /dist /dist"], "the image takes the wheel, not the sources"
    runs = " && ".join(args for name, args in runtime if name == "RUN")
    assert "pip install --no-cache-dir --require-hashes -r /dist/requirements.txt" in runs
    assert "pip install --no-cache-dir --no-deps /dist/waitline-*.whl" in runs


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_the_image_runs_waitline_as_a_numeric_non_root_user(dockerfile: Path) -> None:
    _build, runtime = stages(dockerfile)
    users = [args for name, args in runtime if name == "USER"]
    assert users and users[-1].isdigit() and int(users[-1]) > 0, users
    runs = " && ".join(args for name, args in runtime if name == "RUN")
    assert f"useradd --system --uid {users[-1]}" in runs
    entry = [args for name, args in runtime if name == "ENTRYPOINT"]
    assert entry == ['["waitline"]']
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "waitline" in project["project"]["scripts"]
