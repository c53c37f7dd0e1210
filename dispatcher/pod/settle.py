"""Writing a record's outcome: a result record on success (when configured), a DLQ record on
failure. Shared by the at-least-once engine and the batch baseline.

A record too large to copy into the DLQ gets a reference DLQ record instead (its coordinates,
sizes and failure; `ORIGINAL_OMITTED`); a result too large for the result topic sends the record
to the DLQ, so its failure is reported as what it is, not later as an expiry."""

from __future__ import annotations

import json
import logging

from dispatcher import tracing
from dispatcher.call.contract import CallOutcome, ResultValue
from dispatcher.errors import RecordTooLargeError
from dispatcher.kafka.seam import AckedWrites, FetchedRecord
from dispatcher.kafka.topics import TopicConfig
from dispatcher.pod.metrics import DispatcherMetrics
from dispatcher.secrets import masked_failure
from dispatcher.wire import (
    ORIGINAL_OFFSET,
    ORIGINAL_PARTITION,
    ORIGINAL_TOPIC,
    Failure,
    OutgoingRecord,
    SourceRecord,
    dlq_record,
    dlq_reference_record,
    record_sizes,
)

log = logging.getLogger(__name__)

RECORD_TOO_LARGE = "RecordTooLargeError"

SUCCESS = "success"


def source_record(record: FetchedRecord) -> SourceRecord:
    """The wire module's view of a consumed record."""
    return SourceRecord(
        topic=record.topic, partition=record.partition, offset=record.offset,
        key=record.key, value=record.value, headers=tuple(record.headers),
        timestamp_ms=record.timestamp,
    )


def result_record(source: SourceRecord, wait_id: str,
                  outcome: CallOutcome) -> OutgoingRecord | None:
    """The business result: the source key, source coordinates as headers, and as value the
    handler's return value, or the JSON summary of the call (the `--counterparty-url` preset);
    None when the handler returned None (no result record)."""
    if outcome.result is None:
        return None
    if outcome.result is ResultValue.CALL_SUMMARY:
        value = json.dumps({"waitId": wait_id, "status": outcome.status,
                            "attempts": outcome.attempts,
                            "elapsedSeconds": round(outcome.elapsed_s, 6)}).encode()
    else:
        value = outcome.result
    headers = ((ORIGINAL_TOPIC, source.topic.encode()),
               (ORIGINAL_PARTITION, str(source.partition).encode()),
               (ORIGINAL_OFFSET, str(source.offset).encode()), *tracing.result_headers())
    return OutgoingRecord(key=source.key, value=value, headers=headers)


class OutcomeWriter:
    """Makes a call's outcome durable before the caller moves on (acknowledged writes)."""

    def __init__(self, writer: AckedWrites, topics: TopicConfig,
                 metrics: DispatcherMetrics) -> None:
        self._writer = writer
        self._topics = topics
        self._metrics = metrics
        # bound once: prometheus-client looks a labelled child up under a lock on every call
        self._succeeded = metrics.outcomes.labels(SUCCESS)

    async def settle(self, source: SourceRecord, wait_id: str, outcome: CallOutcome) -> None:
        if outcome.ok:
            result_topic = self._topics.result_topic
            result = result_record(source, wait_id, outcome) if result_topic else None
            if result_topic and result is not None:
                try:
                    await self._writer.write(result_topic, result)
                except RecordTooLargeError as exc:
                    await self.dead_letter(source, Failure(RECORD_TOO_LARGE, f"the call "
                                                           f"succeeded but its result: {exc}"))
                    return
            tracing.outcome(SUCCESS, result_topic if result is not None else None)
            self._succeeded.inc()
            return
        failure = outcome.failure or Failure("UnknownError", "the call failed without a reason")
        await self.dead_letter(source, failure)

    async def dead_letter(self, source: SourceRecord, failure: Failure) -> None:
        """Write `source`'s DLQ record; a reference to it when the copy is too large."""
        failure = masked_failure(failure)  # a counterparty may echo the credentials sent
        dlq_topic, group = self._topics.dlq_topic, self._topics.group
        try:
            await self._writer.write(dlq_topic, dlq_record(tracing.dead_letter_source(source),
                                                           group, failure))
        except RecordTooLargeError as exc:
            failure = too_large(source, failure, exc)
            log.warning("%s/%d@%d is too large to copy into %s (%s); its DLQ record references "
                        "it instead", source.topic, source.partition, source.offset, dlq_topic,
                        record_sizes(source))
            await self._writer.write(dlq_topic, _traced(dlq_reference_record(source, group,
                                                                             failure)))
        tracing.outcome(failure.exception, dlq_topic)
        self._metrics.outcomes.labels(failure.exception).inc()


    async def reference(self, source: SourceRecord, failure: Failure) -> None:
        """Write a DLQ record that references `source` (its coordinates) without copying it."""
        failure = masked_failure(failure)
        await self._writer.write(self._topics.dlq_topic, _traced(
            dlq_reference_record(source, self._topics.group, failure)))
        tracing.outcome(failure.exception, self._topics.dlq_topic)
        self._metrics.outcomes.labels(failure.exception).inc()


def _traced(reference: OutgoingRecord) -> OutgoingRecord:
    """A reference DLQ record with the record span's trace headers (none with tracing off),
    as a copy carries them in place of the original's."""
    trace_headers = tracing.result_headers()
    if not trace_headers:
        return reference
    return OutgoingRecord(reference.key, reference.value, (*reference.headers, *trace_headers))


def too_large(source: SourceRecord, failure: Failure, exc: RecordTooLargeError) -> Failure:
    """The failure a reference DLQ record carries: the sizes, and the original failure."""
    original = "" if failure.exception == RECORD_TOO_LARGE else (
        f"; the record had failed with {failure.exception}: {failure.message}")
    return Failure(RECORD_TOO_LARGE, f"{record_sizes(source)}; {exc}{original}")
