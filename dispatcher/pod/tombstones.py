"""Tombstones written behind the window: a record frees its slot once its outcome is durable.

The last step of a record's lifecycle, the tombstone that closes its wait record, used to hold
the record's window slot until Kafka acknowledged it: one acknowledged write (a few ms) on every
call. Now the record hands its tombstone to this writer and its slot is free. The writer has a
bound of its own (`bound` tombstones unacknowledged at most; a record waits for room, holding
its slot, only when it is full), and the engine waits for every tombstone before it commits on
shutdown. Nothing the commit watermark needs waits for a tombstone: the offset was committable
once the record was prepared. A crash before a tombstone is acknowledged leaves the wait record
open, exactly as a crash between outcome and tombstone did before: the registry sees it open,
never lost, and a pod's late tombstone and the sweep's are the same record.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from dispatcher.errors import ProduceError
from dispatcher.pod.kafka_io import AckedWriter
from dispatcher.wire import OutgoingRecord, tombstone_of


class TombstoneWriter:
    """Writes tombstones to the wait topic in the background, at most `bound` at a time."""

    def __init__(self, writer: AckedWriter, wait_topic: str, bound: int,
                 on_error: Callable[[ProduceError, OutgoingRecord], None]) -> None:
        self._writer = writer
        self._wait_topic = wait_topic
        self._room = asyncio.Semaphore(bound)
        self._on_error = on_error
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def pending(self) -> int:
        """Tombstones handed over and not acknowledged yet."""
        return len(self._tasks)

    async def close(self, prepare: OutgoingRecord) -> None:
        """Hand over the tombstone of `prepare`; waits only while `bound` are unacknowledged."""
        await self._room.acquire()
        task = asyncio.create_task(self._write(prepare), name="waitline-tombstone")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def flush(self) -> None:
        """Wait until every tombstone handed over is acknowledged (or has failed)."""
        while self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _write(self, prepare: OutgoingRecord) -> None:
        try:
            await self._writer.write(self._wait_topic, tombstone_of(prepare))
        except ProduceError as exc:
            self._on_error(exc, prepare)
        finally:
            self._room.release()
