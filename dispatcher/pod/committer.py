"""Offset commits with one owner: a committed offset never goes back.

The periodic commit, the revoke commit and the shutdown commit would otherwise interleave, and
a slow earlier commit (aiokafka retries a failed one on its own) could land after a later one.
Here commits run one at a time under a lock, each commits only offsets past the last committed,
and the periodic loop is stopped rather than cancelled, so a commit in flight always finishes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from dispatcher.clock import monotonic_s
from dispatcher.errors import KafkaClientError
from dispatcher.kafka.seam import SourceConsumer, TopicPartition
from dispatcher.pod.lag import LagReporter
from dispatcher.pod.metrics import DispatcherMetrics
from dispatcher.pod.watermark import PartitionWatermarks, TopicPartitionKey

log = logging.getLogger(__name__)


class Committer:
    """Commits the watermarks' committable offsets; `loop` runs until `stop` is set."""

    def __init__(self, *, consumer: SourceConsumer, watermarks: PartitionWatermarks,
                 metrics: DispatcherMetrics, lag: LagReporter, interval_s: float) -> None:
        self._consumer = consumer
        self._watermarks = watermarks
        self._metrics = metrics
        self._lag = lag
        self._interval_s = interval_s
        self._lock = asyncio.Lock()

    async def loop(self, stop: asyncio.Event, last_fetched_ms: Callable[[], int | None]) -> None:
        """Commit every interval (and update the lag gauges) until `stop` is set."""
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._interval_s):
                    await stop.wait()
            await self.commit()
            self._lag.update(last_fetched_ms())

    async def commit(self, only: list[TopicPartitionKey] | None = None) -> bool:
        """Commit what is due (for `only` these partitions); False if the commit failed (it
        is logged; the next commit carries the same offsets)."""
        async with self._lock:
            due = self._watermarks.commits_due()
            if only is not None:
                due = {k: v for k, v in due.items() if k in only}
            if not due:
                return True
            offsets = {TopicPartition(t, p): o for (t, p), o in due.items()}
            try:
                await self._consumer.commit(offsets)
            except KafkaClientError as exc:
                self._metrics.commits.labels("failed").inc()
                log.warning("offset commit failed, will retry: %r", exc)
                return False
            self._metrics.commits.labels("ok").inc()
            now = monotonic_s()
            for key, offset in due.items():
                self._watermarks.mark_committed(key, offset)
                self._lag.committed(key, now)
            return True
