"""What a revoke does before it commits: every record of the revoked partitions that this pod
will not call is left, uncommitted, to the next owner (DESIGN.md "Rebalances").

A record waiting for its turn (`--ordering`) or, prepared ahead, for a call slot is abandoned at
once; a prepare still in flight is awaited (at most the revoke's wait) so that no wait record
lands after the next owner's tombstone, and abandoned if it outlives the wait. An abandoned
record's task sees the flag and ends without calling.
"""

from __future__ import annotations

import asyncio
import logging

from dispatcher.pod.lag import Unprepared
from dispatcher.pod.turns import Turns
from dispatcher.pod.watermark import TopicPartitionKey

log = logging.getLogger(__name__)


async def leave_uncalled(keys: list[TopicPartitionKey], unprepared: Unprepared,
                         turns: Turns | None, wait_s: float) -> None:
    """Abandon the records of revoked partitions `keys` that were not called here, waiting at
    most `wait_s` for their prepares in flight."""
    if turns is not None:
        for topic, partition, offset in (r for k in keys for r in turns.revoke(k)):
            unprepared[(topic, partition)][offset].abandoned = True  # not called here
    unfinished = [p for k in keys for p in unprepared.get(k, {}).values()]
    if unfinished:
        try:
            async with asyncio.timeout(wait_s):
                await asyncio.gather(*(p.done.wait() for p in unfinished))
        except TimeoutError:
            left = [p for p in unfinished if not p.done.is_set()]
            for pending in left:
                pending.abandoned = True
            log.warning("revoke: %d prepares still unfinished after %.0f s; this pod will "
                        "not call their records, the next owner fetches them", len(left),
                        wait_s)
    for pending in unfinished:  # prepared ahead, never called: uncommitted, left to the
        pending.abandoned = pending.abandoned or pending.waiting_for_slot  # next owner


async def calls_finished(tasks: set[asyncio.Task[None]], keys: list[TopicPartitionKey],
                         wait_s: float) -> None:
    """Wait (at most `wait_s`) for the record tasks of revoked partitions `keys` to end; their
    tasks are named by their records' coordinates."""
    prefixes = tuple(f"{topic}/{partition}@" for topic, partition in keys)
    calling = [t for t in tasks if t.get_name().startswith(prefixes)]
    if calling:
        _done, left = await asyncio.wait(calling, timeout=wait_s)
        if left:
            log.warning("revoke: %d calls of revoked partitions still running after %.0f s; "
                        "their keys may overlap with the next owner's calls (keep "
                        "--rebalance-timeout above twice --deadline)", len(left), wait_s)
