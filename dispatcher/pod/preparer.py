"""Writing a record's wait record (its prepare), and writing it again while the record waits,
prepared ahead, for a call slot (DESIGN.md "The window")."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

from dispatcher.clock import monotonic_s
from dispatcher.errors import RecordTooLargeError
from dispatcher.flow.rate import RateGate
from dispatcher.kafka.seam import AckedWrites
from dispatcher.kafka.topics import TopicConfig
from dispatcher.pod.calls import CallSlots
from dispatcher.pod.lag import AWAITING_CALL_SLOT, AWAITING_TOKEN, UnpreparedRecord
from dispatcher.pod.metrics import DispatcherMetrics
from dispatcher.pod.settings import WindowConfig
from dispatcher.wire import OutgoingRecord, SourceRecord, wait_record


class Preparer:
    """The wait-topic side of a record's start: its prepare, then its turn for a call slot."""

    def __init__(self, writer: AckedWrites, topics: TopicConfig, window: WindowConfig,
                 metrics: DispatcherMetrics, calls: CallSlots, *,
                 clock: Callable[[], float], rate: RateGate | None = None,
                 left_at_stop: Callable[[SourceRecord], bool] = lambda source: False) -> None:
        self._writer = writer
        self._topics = topics
        self._window = window
        self._metrics = metrics
        self._calls = calls
        self._clock = clock  # wall seconds: the expiration is a time of day
        self._rate = rate
        self._left_at_stop = left_at_stop

    async def prepare(self, source: SourceRecord,
                      pending: UnpreparedRecord) -> tuple[OutgoingRecord, int] | None:
        """Write the wait record: it and its partition; None when too large for the topic."""
        prepare = self._wait_record(source)
        try:
            partition = await self._writer.write(self._topics.wait_topic, prepare)
        except RecordTooLargeError as exc:
            self._metrics.produce_errors.labels("wait").inc()
            pending.reason = str(exc)
            return None
        return prepare, partition

    async def take_call_slot(self, source: SourceRecord, prepare: OutgoingRecord,
                             partition: int, pending: UnpreparedRecord) -> OutgoingRecord | None:
        """Wait for a call slot, then (`--rate-limit`) for a token: the wait record (written
        again each `refresh_wait_record_s` of the wait, e.g. an open circuit or a slow rate, so
        it cannot expire into the DLQ while this pod still calls it), or None if the partition
        was revoked meanwhile, or the pod began to stop and leaves it (`left_at_stop`): not
        called here, left uncommitted."""
        pending.reason = AWAITING_CALL_SLOT
        pending.done.set()  # its wait record is durable: a revoke need not wait for it

        def given_up() -> bool:
            return pending.abandoned or self._left_at_stop(source)

        refresh_s = self._window.refresh_wait_record_s
        while not await self._calls.acquire(refresh_s, given_up):
            if given_up():
                return None
            prepare = await self._write_again(source, partition)
        try:
            if self._rate is not None:
                pending.reason = AWAITING_TOKEN
                written_at = monotonic_s()
                while not await self._rate.token(written_at + refresh_s - monotonic_s(),
                                                 given_up):
                    if given_up():
                        break
                    prepare = await self._write_again(source, partition)
                    written_at = monotonic_s()
        except BaseException:
            self._calls.release()
            raise
        if given_up():
            self._calls.release()
            return None
        return prepare

    async def call_again(self, source: SourceRecord, partition: int,
                         still_ours: Callable[[], bool]) -> OutgoingRecord | None:
        """A record already called goes back to the call line (a probe the outage timed out):
        its wait record is written again for the wait to come (and again each
        `refresh_wait_record_s` of it), then it takes a slot and a token; None if its
        partition is revoked first (it is not called again: another pod owns its key)."""
        refresh_s = self._window.refresh_wait_record_s

        def given_up() -> bool:
            return not still_ours()

        while True:
            prepare = await self._write_again(source, partition)
            if not await self._calls.acquire(refresh_s, given_up):
                if given_up():
                    return None
                continue
            if (self._rate is None or await self._rate.token(refresh_s, given_up)) and (
                    not given_up()):
                return prepare
            self._calls.release()
            if given_up():
                return None

    async def _write_again(self, source: SourceRecord, partition: int) -> OutgoingRecord:
        prepare = self._wait_record(source)
        await self._writer.write(self._topics.wait_topic, prepare, partition)
        return prepare

    def _wait_record(self, source: SourceRecord) -> OutgoingRecord:
        expires_at = datetime.fromtimestamp(self._clock() + self._window.wait_expiration_s, UTC)
        return wait_record(source, self._topics.group, expires_at)
