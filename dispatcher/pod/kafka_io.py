"""The Kafka seam for the dispatcher: acknowledged writes with retries, and client factories.

`AckedWriter.write` returns only once the broker has acknowledged the record (acks=all,
idempotent producer). Retriable broker errors are retried with capped exponential backoff for as
long as it takes (a record must never be dropped because the broker was briefly away); a
non-retriable error (record too large, authorisation) is raised as `ProduceError`.
"""

from __future__ import annotations

import logging
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.errors import KafkaError, KafkaTimeoutError
from tenacity import AsyncRetrying, retry_if_exception, wait_random_exponential

from dispatcher.errors import ProduceError
from dispatcher.pod.settings import MAX_RECORD_BYTES, KafkaConfig
from dispatcher.wire import OutgoingRecord

log = logging.getLogger(__name__)


def _retriable(exc: BaseException) -> bool:
    return isinstance(exc, KafkaTimeoutError) or (
        isinstance(exc, KafkaError) and bool(getattr(exc, "retriable", False))
    )


def _log_retry(state: Any) -> None:
    log.warning("Kafka write failed, retrying: %r (attempt %d)",
                state.outcome.exception(), state.attempt_number)


class AckedWriter:
    """Writes records one by one, each awaited until acknowledged; shared by all in-flight
    records (aiokafka batches concurrent sends into the same requests)."""

    def __init__(self, producer: AIOKafkaProducer, backoff_max_s: float = 5.0) -> None:
        self._producer = producer
        self._backoff_max_s = backoff_max_s

    async def write(self, topic: str, record: OutgoingRecord) -> None:
        headers = [(name, value) for name, value in record.headers]
        try:  # the common case, without the retry machinery's cost per record
            await self._producer.send_and_wait(topic, record.value, key=record.key,
                                               headers=headers)
        except KafkaError as exc:
            if not _retriable(exc):
                raise ProduceError(f"writing to {topic} failed: {exc!r}") from exc
            log.warning("Kafka write to %s failed, retrying: %r", topic, exc)
            await self._write_with_retries(topic, record.key, record.value, headers)

    async def _write_with_retries(self, topic: str, key: bytes | None, value: bytes | None,
                                  headers: list[tuple[str, bytes | None]]) -> None:
        retrying = AsyncRetrying(
            retry=retry_if_exception(_retriable),
            wait=wait_random_exponential(multiplier=0.1, max=self._backoff_max_s),
            before_sleep=_log_retry,
            reraise=True,
        )
        try:
            async for attempt in retrying:
                with attempt:
                    await self._producer.send_and_wait(topic, value, key=key, headers=headers)
        except KafkaError as exc:
            raise ProduceError(f"writing to {topic} failed: {exc!r}") from exc


def make_producer(kafka: KafkaConfig, **overrides: Any) -> AIOKafkaProducer:
    options: dict[str, Any] = {
        **kafka.client_options(),
        "acks": "all",
        "enable_idempotence": True,
        "linger_ms": 0,  # measured: 2 ms of linger doubles the ack wait at small windows
        "max_request_size": MAX_RECORD_BYTES,
        "request_timeout_ms": 30_000,
    }
    options.update(overrides)
    return AIOKafkaProducer(**options)


def make_consumer(kafka: KafkaConfig, group: str, **overrides: Any) -> AIOKafkaConsumer:
    options: dict[str, Any] = {
        **kafka.client_options(),
        "group_id": group,
        "enable_auto_commit": False,
        "auto_offset_reset": "earliest",
        "isolation_level": "read_committed",
        "max_partition_fetch_bytes": MAX_RECORD_BYTES,
        "fetch_max_bytes": 4 * MAX_RECORD_BYTES,
    }
    options.update(overrides)
    return AIOKafkaConsumer(**options)


async def stop_quietly(client: AIOKafkaConsumer | AIOKafkaProducer) -> None:
    """Stop a client during shutdown; a failure to stop is logged, not raised."""
    try:
        await client.stop()
    except (TimeoutError, KafkaError, OSError) as exc:
        log.warning("stopping %s failed: %r", type(client).__name__, exc)
