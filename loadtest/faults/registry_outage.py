"""The fault suite's registry scenario: PostgreSQL goes down while a pod dispatches at full
speed and the reconciliation job mirrors its wait topic.

The pod never touches PostgreSQL, so its throughput during the outage is measured against the
same run's throughput before it (calls per second at the counterparty). The job retries until
PostgreSQL is back; afterwards its table must hold exactly the waits the wait topic leaves open.
A kill -9 of the pod at the end makes that set non-empty: the records it had in flight.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

from connectors.registry import RegistryReader
from devstack.stack import LocalStack
from dispatcher.errors import RegistryError
from loadtest.faults.rig import Rig
from loadtest.harness.accounting import Account, Allowed
from loadtest.harness.observe import read_wait_topic
from loadtest.harness.processes import HarnessError, stop
from loadtest.harness.topics import create_topic
from loadtest.mock.generator import produce

WINDOW = 20  # records in flight: 200 TPS against the 100 ms counterparty
DRAIN_WINDOW = 500  # the pod that finishes the backlog after the kill
STOP_TIMEOUT_S = 60.0  # the reconciliation job ends its Spark session on SIGTERM


@dataclass(frozen=True)
class RegistryOutage:
    """What the scenario measured besides the record account."""

    tps_before: float
    tps_during: float
    tps_after: float
    converged_s: float | None  # from the check's start until the table matched; None: never
    open_waits: int
    table_rows: int

    @property
    def ratio(self) -> float:
        return self.tps_during / self.tps_before if self.tps_before else 0.0

    def describe(self) -> str:
        converged = ("never" if self.converged_s is None
                     else f"in {self.converged_s:.1f} s")
        return (f"dispatch TPS before {self.tps_before:.1f}, during the outage "
                f"{self.tps_during:.1f} ({self.ratio:.3f} of before), after "
                f"{self.tps_after:.1f}; registry matched the wait topic's {self.open_waits} "
                f"open waits {converged} ({self.table_rows} rows)")


class ReconcileProcess:
    """`waitline reconcile` for the rig's group, as a process with its own checkpoint."""

    def __init__(self, rig: Rig, dsn: str) -> None:
        self.log = rig.work_dir / f"{rig.tag}-reconcile.log"
        self._process = rig.spawn(["reconcile", "--group", rig.group, "--trigger", "1s",
                                   "--dsn", dsn, "--bootstrap-servers", rig.bootstrap,
                                   "--checkpoint", str(rig.work_dir / "checkpoint")], self.log,
                                  stop_timeout_s=STOP_TIMEOUT_S)

    def check_alive(self) -> None:
        if self._process.poll() is not None:
            raise HarnessError(f"the reconciliation job exited with {self._process.returncode}"
                               f" unasked; see {self.log}")

    def stop(self) -> int:
        stop(self._process, timeout_s=STOP_TIMEOUT_S)
        return self._process.returncode


async def _calls_per_s(rig: Rig, seconds: float, job: ReconcileProcess) -> float:
    first, started = await rig.calls_seen(), time.monotonic()
    deadline = started + seconds
    while time.monotonic() < deadline:
        rig.check_pods_alive()
        job.check_alive()
        await asyncio.sleep(min(1.0, max(0.0, deadline - time.monotonic())))
    return (await rig.calls_seen() - first) / (time.monotonic() - started)


async def table_matches(rig: Rig, registry: RegistryReader, job: ReconcileProcess,
                         timeout_s: float) -> tuple[float | None, int, int]:
    """Until the registry's rows are exactly the wait topic's open waits: (seconds taken or
    None, open waits, rows)."""
    started, wait_topic = time.monotonic(), f"{rig.group}.wait"
    open_waits = {str(w) for w in (await read_wait_topic(rig.bootstrap, wait_topic)).open}
    rows: set[str] = set()
    while time.monotonic() - started < timeout_s:
        job.check_alive()
        try:
            rows = await asyncio.to_thread(registry.wait_ids, wait_topic)
        except RegistryError:
            rows = set()
        if rows == open_waits:
            return time.monotonic() - started, len(open_waits), len(rows)
        await asyncio.sleep(1.0)
    return None, len(open_waits), len(rows)


async def run_registry_outage(rig: Rig, stack: LocalStack, *, down_s: float, phase_s: float,
                              say: Callable[[str], None]
                              ) -> tuple[tuple[int, Account], RegistryOutage]:
    """Measure `phase_s` before, `down_s` during and `phase_s` after a PostgreSQL outage, kill
    the pod, check the table, then drain the backlog and account for every record."""
    bound_tps = WINDOW / 0.1
    await create_topic(rig.bootstrap, rig.topic)
    producing = asyncio.create_task(produce(
        rig.bootstrap, rig.topic, int(1.2 * bound_tps * (down_s + 2 * phase_s + 60)),
        rate_per_s=1.2 * bound_tps, progress=False))  # always a backlog: the pod runs flat out
    rig.watch_commits()
    # A wait expiration past the run: the sweep must not close the killed pod's waits.
    rig.start_pod("pod", "--concurrency", str(WINDOW), "--wait-expiration", "2h")
    job = ReconcileProcess(rig, stack.postgres.dsn)
    registry = RegistryReader(stack.postgres.dsn)
    try:
        await _until_mirrored(rig, registry, job)
        tps_before = await _calls_per_s(rig, phase_s, job)
        await asyncio.to_thread(stack.postgres.stop)
        say(f"  PostgreSQL down for {down_s:g} s (dispatch {tps_before:.0f} TPS before)")
        tps_during = await _calls_per_s(rig, down_s, job)
        await asyncio.to_thread(stack.postgres.start)
        await asyncio.to_thread(stack.postgres.wait_healthy)
        tps_after = await _calls_per_s(rig, phase_s, job)
        await rig.kill_pod("pod")
        converged_s, open_waits, rows = await table_matches(rig, registry, job,
                                                             timeout_s=max(120.0, down_s))
        producing.cancel()
        rig.start_pod("drain", "--concurrency", str(DRAIN_WINDOW), "--wait-expiration", "2h")
        await rig.wait_fully_committed(timeout_s=600)
        await rig.stop_pod("drain")
    finally:
        producing.cancel()
        job_exit = await asyncio.to_thread(job.stop)
    if job_exit not in (0, -15):
        raise HarnessError(f"the reconciliation job exited with {job_exit} on SIGTERM")
    counted = await rig.account(WINDOW, Allowed())
    return counted, RegistryOutage(tps_before, tps_during, tps_after, converged_s, open_waits,
                                   rows)


async def _until_mirrored(rig: Rig, registry: RegistryReader, job: ReconcileProcess,
                          timeout_s: float = 180.0) -> None:
    """Until the job (a Spark session starting) has mirrored the first waits."""
    deadline = time.monotonic() + timeout_s
    while not await asyncio.to_thread(registry.wait_ids, f"{rig.group}.wait"):
        if time.monotonic() > deadline:
            raise HarnessError(f"the reconciliation job mirrored nothing in {timeout_s:.0f} s")
        rig.check_pods_alive()
        job.check_alive()
        await asyncio.sleep(1.0)
