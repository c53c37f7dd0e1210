"""What a revoke does before it commits: every record of the revoked partitions that this pod
will not call is left, uncommitted, to the next owner (DESIGN.md "Rebalances").

The next owner fetches from the committed offset, so it calls again every record above it that
was called here. A record not yet called (prepared ahead and waiting for a call slot, waiting
for its turn under `--ordering`, or its prepare in flight) is therefore left only if no record
above it in its partition was called: the records above the partition's highest called one
are abandoned at once (a prepare in flight is awaited, so that no wait record lands after the
next owner's tombstone); the holes below it are called here, and the revoke waits for their
calls to start. Whatever is still not called when the revoke's wait runs out is abandoned too
(the records called above it are then called again: the documented bound). An abandoned
record's task sees the flag and ends without calling.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable

from dispatcher.flow.ordering import Turns
from dispatcher.pod.lifecycle import RecordTicket, Tickets
from dispatcher.pod.watermark import PartitionWatermarks, TopicPartitionKey

log = logging.getLogger(__name__)


async def leave_uncalled(keys: list[TopicPartitionKey], unprepared: Tickets,
                         watermarks: PartitionWatermarks, turns: Turns | None,
                         wait_s: float) -> None:
    """Abandon the records of revoked partitions `keys` above each one's highest called
    record, and wait at most `wait_s` for those prepares in flight and for the records below
    it to be called."""
    holes: list[RecordTicket] = []
    above: list[RecordTicket] = []
    for key in keys:
        highest = watermarks.highest_prepared(key)
        bound = 0 if highest is None else highest + 1
        for offset, pending in unprepared.get(key, {}).items():
            if offset < bound:
                holes.append(pending)
            else:
                pending.abandoned = True  # not called here
                above.append(pending)
        if turns is not None:
            turns.revoke(key, from_offset=bound)  # wakes them: abandoned, they end
    calls = [pending.call_signal() for pending in holes]
    try:
        async with asyncio.timeout(wait_s):
            await asyncio.gather(*(p.done.wait() for p in above), *(c.wait() for c in calls))
    except TimeoutError:
        _give_up(keys, turns, [p for p, c in zip(holes, calls, strict=True) if not c.is_set()],
                 above, wait_s)


def _give_up(keys: list[TopicPartitionKey], turns: Turns | None,
             uncalled: list[RecordTicket], above: list[RecordTicket],
             wait_s: float) -> None:
    """The wait ran out: nothing more of these partitions is called here."""
    for pending in uncalled:
        pending.abandoned = True
    if turns is not None:
        for key in keys:
            turns.revoke(key)
    prepares = sum(not p.done.is_set() for p in above)
    log.warning("revoke: after %.0f s, %d prepares still unfinished and %d records below a "
                "called one still not called; this pod will not call them, the next owner "
                "fetches them (and calls again what was called above them)", wait_s, prepares,
                len(uncalled))


async def calls_finished(tasks: Iterable[asyncio.Task[None]], keys: list[TopicPartitionKey],
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
