"""The engine's lag gauges: committed-offset lag, actuality lag, and per partition the oldest
record holding back the commit (stuck-record visibility), set once per commit interval."""

from __future__ import annotations

import logging
from collections.abc import Callable

from dispatcher.clock import monotonic_s
from dispatcher.kafka.seam import SourceConsumer
from dispatcher.pod.lifecycle import Tickets
from dispatcher.pod.metrics import DispatcherMetrics
from dispatcher.pod.stalls import PartitionStall, Pending, StallTracker
from dispatcher.pod.watermark import PartitionWatermarks, TopicPartitionKey, partition_key

log = logging.getLogger(__name__)


class LagReporter:
    """Reads the engine's bookkeeping (never changes it) and sets the lag gauges."""

    def __init__(self, *, consumer: SourceConsumer, watermarks: PartitionWatermarks,
                 unprepared: Tickets, metrics: DispatcherMetrics, stalls: StallTracker,
                 clock: Callable[[], float]) -> None:
        self._consumer = consumer
        self._watermarks = watermarks
        self._unprepared = unprepared
        self._metrics = metrics
        self._tracker = stalls
        self._clock = clock
        self.stalls: list[PartitionStall] = []

    def committed(self, tp: TopicPartitionKey, now: float) -> None:
        self._tracker.committed(tp, now)

    def forget(self, tp: TopicPartitionKey) -> None:
        self._tracker.forget(tp)
        self._metrics.forget_partition(tp)

    def update(self, last_fetched_ms: int | None) -> None:
        lag = 0
        for tp in self._consumer.assignment():
            highwater = self._consumer.highwater(tp)
            committed = self._watermarks.last_committed(partition_key(tp))
            if highwater is not None:
                lag += max(0, highwater - (committed or 0))
        self._metrics.commit_lag.set(lag)
        oldest = [p.timestamp_ms for ps in self._unprepared.values() for p in ps.values()]
        now_ms = self._clock() * 1000
        if oldest:
            self._metrics.actuality_lag.set(max(0.0, (now_ms - min(oldest)) / 1000))
        elif lag > 0 and last_fetched_ms is not None:
            self._metrics.actuality_lag.set(max(0.0, (now_ms - last_fetched_ms) / 1000))
        else:
            self._metrics.actuality_lag.set(0)
        self._update_stalls()

    def _update_stalls(self) -> None:
        now = monotonic_s()
        due = self._watermarks.commits_due()
        stalls = []
        for tp in self._consumer.assignment():
            key = partition_key(tp)
            pending = self._unprepared.get(key)
            oldest = None
            if pending:
                offset = min(pending)
                record = pending[offset]
                oldest = Pending(offset, record.fetched_at, f"waiting for {record.state.value}")
            stall = self._tracker.observe(key, oldest, bool(pending) or key in due, now)
            self._metrics.set_partition_stall(stall)
            if stall.warn:
                log.warning("stalled partition: %s", stall.describe())
            stalls.append(stall)
        self.stalls = stalls
