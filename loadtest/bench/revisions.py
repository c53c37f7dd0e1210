"""CPU per record of the pod at two revisions of this repository, side by side: the A/B of a
change (`waitline loadtest revisions --base REV`).

Each revision's tree is exported with `git archive` into a folder of its own (this checkout's
working tree serves as the head unless `--head` names a revision), and its pods import it through
`PYTHONPATH`; pod children run with `PYTHONSAFEPATH` (`child_env`), so no working directory can
shadow it, and where each variant imports `dispatcher` from is checked before anything is
measured (an A/B that ran the same code twice is the mistake this guards against). Both run
`--counterparty-url` against a mock counterparty of their own, at the same time, as
`pod_cpu.py` measures them; the order they start in alternates. The installed dependencies are
this checkout's: a base revision that needs others is refused by its own import errors.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from loadtest.bench.pod_cpu import PodVariant
from loadtest.harness.processes import HarnessError, child_env

REPO = Path(__file__).resolve().parents[2]
POD_ARGS = ("--counterparty-url", "{url}")


def export_revision(rev: str, into: Path, repo: Path = REPO) -> str:
    """Write `rev`'s tree into `into` (made if missing); its commit's short name. HarnessError
    when `rev` names no commit of `repo`."""
    found = subprocess.run(["git", "-C", str(repo), "rev-parse", "--verify", "--quiet",
                            f"{rev}^{{commit}}"], capture_output=True, text=True, check=False)
    if found.returncode != 0:
        raise HarnessError(f"{rev!r} is not a commit of {repo} (git rev-parse found none)")
    commit = found.stdout.strip()
    shutil.rmtree(into, ignore_errors=True)  # a tree exported before may hold files since gone
    into.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(repo), "archive", "--format=tar", commit],
                             capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    return commit[:9]


def imported_from(tree: Path) -> Path:
    """The folder a pod child whose `PYTHONPATH` is `tree` imports `dispatcher` from."""
    probe = subprocess.run([sys.executable, "-c", "import dispatcher; print(dispatcher.__file__)"],
                           env=child_env({"PYTHONPATH": str(tree)}), capture_output=True,
                           text=True, check=False)
    if probe.returncode != 0:
        raise HarnessError(f"the pod cannot import dispatcher from {tree}: "
                           f"{probe.stderr.strip().splitlines()[-1:]}")
    return Path(probe.stdout.strip()).parent.parent


def variant(name: str, tree: Path) -> PodVariant:
    """The pod of `tree`, checked to import its own code."""
    found = imported_from(tree)
    if found.resolve() != tree.resolve():
        raise HarnessError(f"{name}: a pod with PYTHONPATH={tree} imports dispatcher from "
                           f"{found}, not from that tree")
    return PodVariant(name, POD_ARGS, {"PYTHONPATH": str(tree)})


def interpreter_variants(python: str, loop: str = "pod") -> tuple[PodVariant, PodVariant]:
    """This checkout's `loop` on this interpreter and on `python`, each checked to import this
    checkout's code (its environment must have the project's dependencies: `uv sync` with
    `UV_PROJECT_ENVIRONMENT` and `--python`)."""
    variants = []
    for interpreter in (sys.executable, python):
        probe = subprocess.run([interpreter, "-c", "import sys, dispatcher; "
                                "print(sys.version.split()[0]); print(dispatcher.__file__)"],
                               env=child_env({"PYTHONPATH": str(REPO)}), capture_output=True,
                               text=True, check=False)
        if probe.returncode != 0:
            raise HarnessError(f"{interpreter} cannot run this checkout's pod: "
                               f"{probe.stderr.strip().splitlines()[-1:]}")
        version, found = probe.stdout.split()
        if Path(found).parent.parent.resolve() != REPO.resolve():
            raise HarnessError(f"{interpreter} imports dispatcher from {found}, not from {REPO}")
        args = POD_ARGS if loop == "pod" else ()
        variants.append(PodVariant(f"Python {version} ({interpreter})", args,
                                   {"PYTHONPATH": str(REPO)}, python=interpreter, loop=loop))
    first, second = variants
    return first, second


def peer_variants(peer: str, python: str) -> tuple[PodVariant, PodVariant]:
    """This checkout's pod on this interpreter and the peer `peer` (a mode of compare's
    `PEERS`) on `python`, whose environment must have the peers extra (pyrallel-consumer needs
    Python 3.12 or later); both checked to import this checkout's code."""
    pod, _ = interpreter_variants(python)
    _, other = interpreter_variants(python, peer)
    return (PodVariant(f"pod, {pod.name}", pod.args, pod.env, python=pod.python),
            PodVariant(f"{peer}, {other.name}", (), other.env, python=other.python, loop=peer))


def baseline_variants(loop: str, python: str = sys.executable) -> tuple[PodVariant, PodVariant]:
    """A baseline loop of compare (`bare-wait`: the protocol floor) and this checkout's pod,
    both on `python`: the baseline first, so a ratio of the second over the first reads
    "the pod ÷ the baseline"."""
    pod, baseline = peer_variants(loop, python)
    return baseline, pod


def revision_variants(base: str, head: str | None, work_dir: Path) -> tuple[PodVariant, PodVariant]:
    """The base revision's pod and the head's (this checkout's working tree when `head` is
    None), each exported under `work_dir`."""
    base_name = export_revision(base, work_dir / "base")
    if head is None:
        head_variant = variant("this checkout", REPO)
    else:
        head_name = export_revision(head, work_dir / "head")
        head_variant = variant(f"head {head_name}", work_dir / "head")
    return variant(f"base {base_name}", work_dir / "base"), head_variant
