"""Load-test input: payment records shaped like the reference design's, and a Kafka producer.

A record's key is its `operationId` (UUID4 text), or with `keys=K` one of K fixed keys
(`key-0` … `key-{K-1}`, by counter), for measuring `--ordering key`; its value is compact JSON with
`operationId`, `operationDate`, `cardNumber`, `price`, `terminalId` and
`additionalData = str(counter mod 10)`, the field the `seed` latency model reads.
"""

from __future__ import annotations

import asyncio
import json
import random
import uuid
from collections import deque
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from dispatcher.errors import ConfigError, ProduceError
from dispatcher.kafka.clients import make_producer
from loadtest.harness.clients import KafkaTarget, kafka_config

# A fixed default keeps make_record pure; produce() stamps the real time instead.
REFERENCE_OPERATION_DATE = datetime(2025, 1, 1, tzinfo=UTC)
# Sends not yet acknowledged; past this, produce() waits for the oldest, bounding memory.
MAX_UNACKED_SENDS = 10_000
CLIENT_ID = "waitline-generator"
LINGER_MS = 20
MAX_BATCH_BYTES = 256 * 1024
# Pacing sleeps shorter than this cost more timer wake-ups than they smooth.
MIN_PACING_SLEEP_S = 0.005
PROGRESS_EVERY = 1_000  # sends between progress-bar updates


def make_record(counter: int, rng: random.Random, *,
                at: datetime = REFERENCE_OPERATION_DATE) -> tuple[bytes, bytes]:
    """The (key, value) of record number `counter`; the same inputs always give the same bytes."""
    operation_id = str(uuid.UUID(int=rng.getrandbits(128), version=4))
    price_cents = rng.randrange(1, 1_000_000)
    value = {
        "operationId": operation_id,
        "operationDate": at.astimezone(UTC).isoformat(timespec="milliseconds")
        .replace("+00:00", "Z"),
        "cardNumber": f"{rng.randrange(10**16):016d}",
        "price": f"{price_cents // 100}.{price_cents % 100:02d}",
        "terminalId": f"T{rng.randrange(10**8):08d}",
        "additionalData": str(counter % 10),
    }
    return operation_id.encode(), json.dumps(value, separators=(",", ":")).encode()


async def produce(kafka: KafkaTarget, topic: str, count: int, *,
                  rate_per_s: float | None = None, progress: bool = True,
                  start: int = 0, keys: int | None = None,
                  on_acked: Callable[[int], None] | None = None) -> int:
    """Write records `start`..`start+count-1` to `topic`; returns how many Kafka acknowledged.

    Sends are pipelined (up to MAX_UNACKED_SENDS await their acknowledgement at once) and all
    are acknowledged before this returns. `rate_per_s` paces the sends; None sends at full
    speed. `on_acked` sees the count acknowledged so far, every PROGRESS_EVERY sends and at the
    end (as the progress bar does). A Kafka failure raises ProduceError.
    """
    if count < 0:
        raise ConfigError(f"count must be 0 or more, not {count}")
    if keys is not None and keys < 1:
        raise ConfigError(f"keys must be at least 1, not {keys}")
    if rate_per_s is not None and not rate_per_s > 0:
        raise ConfigError(f"rate must be a positive number of records per second, not {rate_per_s}")
    # The pod's producer settings (durable_writes: acks=all, idempotent), batched.
    config = kafka_config(kafka, CLIENT_ID)
    producer = make_producer(config, linger_ms=LINGER_MS, max_batch_size=MAX_BATCH_BYTES)
    bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                   TimeRemainingColumn(), disable=not progress)
    try:
        try:
            await producer.start()
            with bar:
                task = bar.add_task(f"producing to {topic}", total=count)
                def acked_so_far(acked: int) -> None:
                    bar.update(task, completed=acked)
                    if on_acked is not None:
                        on_acked(acked)

                return await _send_all(producer, topic, range(start, start + count), rate_per_s,
                                       on_acked=acked_so_far, keys=keys)
        finally:
            await producer.stop()  # also after a failed start, which leaves the client open
    except KafkaError as exc:
        raise ProduceError(f"producing to {topic!r} at {config.bootstrap_servers} failed: "
                           f"{exc!r}") from exc


async def _send_all(producer: AIOKafkaProducer, topic: str, counters: range,
                    rate_per_s: float | None, on_acked: Callable[[int], None], *,
                    keys: int | None = None) -> int:
    rng = random.Random()  # seeded from the OS: every run writes new operation ids
    loop = asyncio.get_running_loop()
    started_s = loop.time()
    unacked: deque[asyncio.Future[Any]] = deque()
    acked = 0
    for sent, counter in enumerate(counters):
        if rate_per_s is not None:
            ahead_s = started_s + sent / rate_per_s - loop.time()
            if ahead_s > MIN_PACING_SLEEP_S:
                await asyncio.sleep(ahead_s)
        key, value = make_record(counter, rng, at=datetime.now(UTC))
        if keys is not None:
            key = f"key-{counter % keys}".encode()
        # send() only enqueues into a batch; it waits when the producer's buffer is full.
        unacked.append(await producer.send(topic, value=value, key=key))
        if len(unacked) >= MAX_UNACKED_SENDS:
            await unacked[0]
        while unacked and unacked[0].done():
            unacked.popleft().result()  # raises the send's KafkaError, if any
            acked += 1
        if sent % PROGRESS_EVERY == 0:
            on_acked(acked)
    while unacked:
        await unacked.popleft()
        acked += 1
    on_acked(acked)
    return acked
