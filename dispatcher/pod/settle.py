"""Writing a record's outcome: a result record on success (when configured), a DLQ record on
failure. Shared by the at-least-once engine and the batch baseline."""

from __future__ import annotations

import json

from aiokafka.structs import ConsumerRecord

from dispatcher.pod.kafka_io import AckedWriter
from dispatcher.pod.metrics import DispatcherMetrics
from dispatcher.pod.outcome import CallOutcome
from dispatcher.pod.settings import TopicConfig
from dispatcher.wire import (
    ORIGINAL_OFFSET,
    ORIGINAL_PARTITION,
    ORIGINAL_TOPIC,
    Failure,
    OutgoingRecord,
    SourceRecord,
    dlq_record,
)

SUCCESS = "success"


def source_record(record: ConsumerRecord[bytes, bytes]) -> SourceRecord:
    """The wire module's view of a consumed record."""
    return SourceRecord(
        topic=record.topic, partition=record.partition, offset=record.offset,
        key=record.key, value=record.value, headers=tuple(record.headers),
        timestamp_ms=record.timestamp,
    )


def result_record(source: SourceRecord, wait_id: str, outcome: CallOutcome) -> OutgoingRecord:
    """The business result: the source key, a JSON summary of the call, source coordinates."""
    body = {"waitId": wait_id, "status": outcome.status, "attempts": outcome.attempts,
            "elapsedSeconds": round(outcome.elapsed_s, 6)}
    headers = ((ORIGINAL_TOPIC, source.topic.encode()),
               (ORIGINAL_PARTITION, str(source.partition).encode()),
               (ORIGINAL_OFFSET, str(source.offset).encode()))
    return OutgoingRecord(key=source.key, value=json.dumps(body).encode(), headers=headers)


class OutcomeWriter:
    """Makes a call's outcome durable before the caller moves on (acknowledged writes)."""

    def __init__(self, writer: AckedWriter, topics: TopicConfig,
                 metrics: DispatcherMetrics) -> None:
        self._writer = writer
        self._topics = topics
        self._metrics = metrics

    async def settle(self, source: SourceRecord, wait_id: str, outcome: CallOutcome) -> None:
        if outcome.ok:
            if self._topics.result_topic:
                await self._writer.write(self._topics.result_topic,
                                         result_record(source, wait_id, outcome))
            self._metrics.outcomes.labels(SUCCESS).inc()
            return
        failure = outcome.failure or Failure("UnknownError", "the call failed without a reason")
        await self.dead_letter(source, failure)

    async def dead_letter(self, source: SourceRecord, failure: Failure) -> None:
        await self._writer.write(self._topics.dlq_topic,
                                 dlq_record(source, self._topics.group, failure))
        self._metrics.outcomes.labels(failure.exception).inc()
