"""The reconciliation job mirroring a wait topic while a broker fault happens under it: started
once the pod has made its wait topic, it must have applied a batch of events before the fault,
apply batches again once the fault began, never exit, and afterwards hold in the registry
exactly the waits the wait topic leaves open (`ReconcileProcess` and the table check are the
registry outage's)."""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from connectors.registry import RegistryReader
from loadtest.faults.registry_outage import ReconcileProcess, table_matches
from loadtest.faults.rig import Rig
from loadtest.harness.processes import HarnessError

APPLIED = re.compile(r"mirror batch applied.*?events_in=(\d+)")
FIRST_BATCH_S = 420.0  # a Spark session starting on the shared machine under load
CONVERGE_S = 240.0
SAMPLE_EVERY_S = 1.0


@dataclass
class Mirroring:
    """The job, and when (monotonic) each batch with events was first seen in its log."""

    rig: Rig
    job: ReconcileProcess
    registry: RegistryReader
    batches: list[float] = field(default_factory=list)
    _seen_lines: int = 0

    @classmethod
    @contextlib.asynccontextmanager
    async def maybe(cls, rig: Rig, dsn: str | None) -> AsyncIterator[Mirroring | None]:
        """With a registry DSN: the job started once the pod has joined, and its first batch
        with events applied, before this yields; stopped afterwards."""
        if dsn is None:
            yield None
            return
        await rig.wait_joined("pod")  # the pod has created the wait topic the job reads
        mirroring = cls(rig, ReconcileProcess(rig, dsn), RegistryReader(dsn))
        watching = asyncio.create_task(mirroring._watch(), name=f"{rig.tag}-mirror-watch")
        try:
            await mirroring._until_first_batch()
            yield mirroring
        finally:
            watching.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watching
            code = await asyncio.to_thread(mirroring.job.stop)
            if code not in (0, -15):
                raise HarnessError(f"the reconciliation job exited with {code} on SIGTERM; "
                                   f"see {mirroring.job.log}")

    async def _watch(self) -> None:
        while True:
            await self._read_log()
            await asyncio.sleep(SAMPLE_EVERY_S)

    async def _read_log(self) -> None:
        text = await asyncio.to_thread(self.job.log.read_text, errors="replace")
        lines = text.splitlines()
        now = time.monotonic()
        for line in lines[self._seen_lines:]:
            if (match := APPLIED.search(line)) and int(match.group(1)) > 0:
                self.batches.append(now)
        self._seen_lines = len(lines)

    async def _until_first_batch(self) -> None:
        deadline = time.monotonic() + FIRST_BATCH_S
        while not self.batches:
            if time.monotonic() > deadline:
                raise HarnessError(f"the reconciliation job applied no batch in "
                                   f"{FIRST_BATCH_S:.0f} s; see {self.job.log}")
            self.job.check_alive()
            self.rig.check_pods_alive()
            await asyncio.sleep(SAMPLE_EVERY_S)

    async def check(self, fault_at: float, ended_at: float) -> str:
        """After the fault (the backlog drained): the job alive, batches applied since the
        fault began, the table matching the wait topic's open waits; what it saw, as a phrase
        for the scenario's figures."""
        self.job.check_alive()
        converged_s, open_waits, rows = await table_matches(self.rig, self.registry, self.job,
                                                            timeout_s=CONVERGE_S)
        await self._read_log()
        during = sum(1 for t in self.batches if fault_at <= t <= ended_at)
        since = sum(1 for t in self.batches if t >= fault_at)
        if not since:
            raise HarnessError("the reconciliation job applied no batch after the fault began; "
                               f"see {self.job.log}")
        if converged_s is None:
            raise HarnessError(f"the registry held {rows} rows, the wait topic {open_waits} open "
                               f"waits, {CONVERGE_S:.0f} s after the backlog drained; see "
                               f"{self.job.log}")
        return (f"; the reconciliation job applied {during} batches with events while the fault "
                f"lasted ({since} since it began) and its table matched the wait topic's "
                f"{open_waits} open waits {converged_s:.1f} s after the backlog drained")
