"""Helpers for the dispatcher's integration tests: topics, input records, reading results back,
a recording HTTP counterparty, and running the pod in-process or as a `waitline dispatch` process.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import os
import re
import signal
import sys
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from aiohttp import web
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.structs import ConsumerRecord

from dispatcher.pod.runner import run_pod
from dispatcher.pod.settings import DispatchSettings, load_settings
from dispatcher.wire import (
    DlqEntry,
    Headers,
    SourceRecord,
    WaitEntry,
    parse_dlq_record,
    parse_wait_record,
    wait_id_for,
)
from loadtest.harness.clients import KafkaTarget, client_options
from loadtest.harness.observe import (  # noqa: F401 - re-exported for the tests
    committed_offsets,
    end_offsets,
    fully_committed,
    registry_open,
    topic_partitions,
)
from loadtest.harness.topics import create_topic as create_and_wait

LARGE_RECORD_BYTES = 4 * 1024 * 1024
# What the engine logs once it holds partitions ("partitions assigned: none" holds none).
HOLDS_PARTITIONS_LOG = r"partitions assigned: (?!none)"


# --- Kafka ---------------------------------------------------------------------------------

async def create_topic(kafka: KafkaTarget, name: str, partitions: int = 3,
                       configs: dict[str, str] | None = None) -> None:
    await create_and_wait(kafka, name, partitions, configs)


async def topic_exists(kafka: KafkaTarget, name: str) -> bool:
    admin = AIOKafkaAdminClient(**client_options(kafka))
    await admin.start()
    try:
        return name in await admin.list_topics()
    finally:
        await admin.close()


@dataclass(frozen=True)
class InputRecord:
    """A record to produce; `partition` None lets the producer choose."""

    key: bytes | None
    value: bytes | None
    headers: Headers = ()
    partition: int | None = 0


async def produce_records(kafka: KafkaTarget, topic: str,
                          records: Sequence[InputRecord]) -> list[SourceRecord]:
    """Write `records` in order and return them as consumed records will look (coordinates,
    timestamp), for exact comparison with what the dispatcher wrote."""
    producer = AIOKafkaProducer(**client_options(kafka), acks="all", enable_idempotence=True,
                                max_request_size=LARGE_RECORD_BYTES)
    await producer.start()
    sent: list[SourceRecord] = []
    try:
        base_ms = int(time.time() * 1000)
        for index, record in enumerate(records):
            timestamp_ms = base_ms + index  # explicit, so the test knows it exactly
            if record.key is None and record.value is None:
                metadata = await _send_null_key_and_value(producer, topic, record, timestamp_ms)
            else:
                metadata = await producer.send_and_wait(
                    topic, record.value, key=record.key, partition=record.partition,
                    headers=list(record.headers), timestamp_ms=timestamp_ms)
            sent.append(SourceRecord(topic=topic, partition=metadata.partition,
                                     offset=metadata.offset, key=record.key, value=record.value,
                                     headers=record.headers, timestamp_ms=timestamp_ms))
    finally:
        await producer.stop()
    return sent


async def _send_null_key_and_value(producer: AIOKafkaProducer, topic: str, record: InputRecord,
                                   timestamp_ms: int) -> Any:
    """aiokafka's `send` refuses a record with neither key nor value (Java clients write them);
    its batch API does not, so inputs like those of other clients can be written."""
    batch = producer.create_batch()
    batch.append(key=None, value=None, timestamp=timestamp_ms, headers=list(record.headers))
    batch.close()
    delivered = await producer.send_batch(batch, topic, partition=record.partition or 0)
    return await delivered


async def read_topic(kafka: KafkaTarget, topic: str) -> list[ConsumerRecord[bytes, bytes]]:
    """Every record of `topic` up to its current end, partition by partition in offset order;
    empty when the topic does not exist."""
    partitions = await topic_partitions(kafka, topic)
    if not partitions:
        return []
    consumer = AIOKafkaConsumer(**client_options(kafka), enable_auto_commit=False,
                                max_partition_fetch_bytes=LARGE_RECORD_BYTES)
    await consumer.start()
    records: list[ConsumerRecord[bytes, bytes]] = []
    try:
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)
        ends = await consumer.end_offsets(partitions)
        async with asyncio.timeout(30):
            while not await _reached(consumer, ends):
                batch = await consumer.getmany(timeout_ms=200)
                for tp_records in batch.values():
                    records.extend(tp_records)
    finally:
        await consumer.stop()
    return sorted(records, key=lambda r: (r.partition, r.offset))


async def _reached(consumer: AIOKafkaConsumer, ends: dict[TopicPartition, int]) -> bool:
    for tp, end in ends.items():
        if await consumer.position(tp) < end:
            return False
    return True


@dataclass
class WaitTopic:
    """The wait topic read back, by wait id: how many prepares and tombstones, the first
    prepare parsed, and whether the id's last record is a tombstone."""

    prepares: Counter[uuid.UUID] = field(default_factory=Counter)
    tombstones: Counter[uuid.UUID] = field(default_factory=Counter)
    first_prepare: dict[uuid.UUID, WaitEntry] = field(default_factory=dict)
    closed: dict[uuid.UUID, bool] = field(default_factory=dict)

    @property
    def open_ids(self) -> set[uuid.UUID]:
        """Wait ids whose last record is a prepare: "potentially lost", owned by the registry."""
        return {wait_id for wait_id, closed in self.closed.items() if not closed}


async def read_wait_topic(kafka: KafkaTarget, topic: str) -> WaitTopic:
    """Each wait id's prepares and tombstones, and whether the registry would close it (by its
    rules: a late prepare of an earlier owner, a withdrawal; connectors/rows.py)."""
    state = WaitTopic()
    records = await read_topic(kafka, topic)
    for record in records:
        entry = parse_wait_record(record.key, record.value, record.headers)
        if entry.is_tombstone:
            state.tombstones[entry.wait_id] += 1
        else:
            state.prepares[entry.wait_id] += 1
            state.first_prepare.setdefault(entry.wait_id, entry)
    still_open = registry_open(records, topic)
    state.closed = {wait_id: wait_id not in still_open
                    for wait_id in (*state.prepares, *state.tombstones)}
    return state


async def read_dlq(kafka: KafkaTarget, topic: str) -> list[DlqEntry]:
    return [parse_dlq_record(r.key, r.value, r.headers) for r in await read_topic(kafka, topic)]


def wait_ids(group: str, sources: Sequence[SourceRecord]) -> list[uuid.UUID]:
    return [wait_id_for(group, s.topic, s.partition, s.offset) for s in sources]


async def input_wait_ids(kafka: KafkaTarget, group: str, topic: str) -> set[uuid.UUID]:
    """The wait id of every record of `topic` (by coordinates, as the dispatcher derives them)."""
    return {wait_id_for(group, topic, partition, offset)
            for partition, end in (await end_offsets(kafka, topic)).items()
            for offset in range(end)}


# --- the counterparty ----------------------------------------------------------------------

@dataclass(frozen=True)
class Answer:
    """How the recording counterparty answers one call."""

    delay_s: float = 0.0
    status: int = 200


class Outage:
    """A `decide` for the recording counterparty: 503 to every call for `seconds` from the
    first call, then 200; `ends` is when (time.monotonic()), far ahead until a call came."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.ends = time.monotonic() + 1e9

    def __call__(self, _body: bytes) -> Answer:
        self.ends = min(self.ends, time.monotonic() + self.seconds)
        return Answer(status=503) if time.monotonic() < self.ends else Answer()


@dataclass(frozen=True)
class Call:
    idempotency_key: str | None
    body_bytes: int
    arrived_s: float  # time.monotonic()


class RecordingCounterparty:
    """An HTTP counterparty that records every call (Idempotency-Key, body size, arrival time)
    and answers each as `decide(body)` says. `async with RecordingCounterparty(...) as cp:`."""

    def __init__(self, decide: Callable[[bytes], Answer] = lambda _body: Answer()) -> None:
        self._decide = decide
        self.calls: list[Call] = []
        self.open_calls = 0
        self.peak_open_calls = 0  # the most calls it held at once
        self._runner: web.AppRunner | None = None
        self.url = ""

    def calls_per_key(self) -> Counter[str]:
        """Calls per Idempotency-Key."""
        return Counter(c.idempotency_key for c in self.calls if c.idempotency_key is not None)

    def peak_rate_per_s(self) -> float:
        """The most calls that arrived within any one-second window."""
        times = sorted(c.arrived_s for c in self.calls)
        peak, start = 0, 0
        for end, arrived in enumerate(times):
            while arrived - times[start] > 1.0:
                start += 1
            peak = max(peak, end - start + 1)
        return float(peak)

    async def _handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        self.calls.append(Call(request.headers.get("Idempotency-Key"), len(body),
                               time.monotonic()))
        answer = self._decide(body)
        self.open_calls += 1
        self.peak_open_calls = max(self.peak_open_calls, self.open_calls)
        try:
            await asyncio.sleep(answer.delay_s)
        finally:
            self.open_calls -= 1
        return web.json_response({"status": answer.status}, status=answer.status)

    async def __aenter__(self) -> Self:
        app = web.Application(client_max_size=LARGE_RECORD_BYTES)
        app.router.add_post("/{path:.*}", self._handle)
        self._runner = web.AppRunner(app, handler_cancellation=True, access_log=None,
                                     shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}/calls"
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


# --- running the pod -----------------------------------------------------------------------

async def wait_until(condition: Callable[[], bool | Awaitable[bool]], what: str,
                     timeout_s: float = 60.0) -> None:
    """Poll `condition` (plain or async) until it holds; AssertionError naming `what` if not."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = condition()
        if await result if inspect.isawaitable(result) else result:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout_s:g} s: {what}")
        await asyncio.sleep(0.1)


async def run_pod_until(settings: DispatchSettings, finished: Callable[[], Awaitable[bool]],
                        timeout_s: float = 60.0) -> None:
    """Run the pod in this process until `finished()` holds, then stop it (drain) and wait."""
    stop = asyncio.Event()
    pod = asyncio.create_task(run_pod(settings, stop), name="pod-under-test")
    try:
        async with asyncio.timeout(timeout_s):
            while not await finished():
                if pod.done():
                    await pod  # raises what stopped it
                    raise AssertionError("the pod stopped before the test's condition held")
                await asyncio.sleep(0.2)
    finally:
        stop.set()
        async with asyncio.timeout(timeout_s):
            await pod


def dispatch_argv(**flags: str | int | bool) -> list[str]:
    """`python -m dispatcher dispatch --flag value ...` for a subprocess; a bool flag becomes
    `--flag` or `--no-flag`."""
    argv = [sys.executable, "-m", "dispatcher", "dispatch"]
    for name, value in flags.items():
        option = name.replace("_", "-")
        if isinstance(value, bool):
            argv.append(f"--{option}" if value else f"--no-{option}")
        else:
            argv += [f"--{option}", str(value)]
    return argv


class PodExitedError(AssertionError):
    """The pod ended while a test waited for something it had to do."""

    def __init__(self, code: int, log: str, what: str) -> None:
        super().__init__(f"dispatcher exited {code} before {what}:\n{log[-3000:]}")
        self.code, self.log = code, log


class DispatcherProcess:
    """A `waitline dispatch` subprocess whose output goes to `log_path`, run in `cwd` if given,
    with `env` added to this process's environment; killed on exit if it is still running.
    `async with DispatcherProcess(argv, log_path) as pod:`.
    """

    def __init__(self, argv: list[str], log_path: Path, cwd: Path | None = None,
                 env: dict[str, str] | None = None) -> None:
        self._argv = argv
        self.log_path = log_path
        self._cwd = cwd
        self._env = env
        self._process: asyncio.subprocess.Process | None = None

    @property
    def process(self) -> asyncio.subprocess.Process:
        if self._process is None:
            raise RuntimeError("the dispatcher process has not started")
        return self._process

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    async def wait_for_log(self, pattern: str, timeout_s: float = 30.0) -> re.Match[str]:
        """Wait until the regular expression `pattern` matches in the log; fail early if the
        process ends first."""
        deadline = time.monotonic() + timeout_s
        while (match := re.search(pattern, self.log())) is None:
            if self.process.returncode is not None:
                raise AssertionError(f"dispatcher exited {self.process.returncode} before "
                                     f"logging {pattern!r}:\n{self.log()[-3000:]}")
            if time.monotonic() > deadline:
                raise AssertionError(f"no {pattern!r} within {timeout_s} s:\n"
                                     f"{self.log()[-3000:]}")
            await asyncio.sleep(0.1)
        return match

    async def wait_while_running(self, condition: Callable[[], bool | Awaitable[bool]],
                                 what: str, timeout_s: float = 60.0) -> None:
        """`wait_until` `condition`, failing at once, with the exit code and the log's tail,
        if the process ends first: a pod that stopped will not make it hold."""
        async def holds_or_ended() -> bool:
            result = condition()
            if await result if inspect.isawaitable(result) else result:
                return True
            if self.process.returncode is not None:
                raise PodExitedError(self.process.returncode, self.log(), what)
            return False

        await wait_until(holds_or_ended, what, timeout_s)

    def send(self, signum: signal.Signals) -> None:
        self.process.send_signal(signum)

    async def wait(self, timeout_s: float) -> int:
        async with asyncio.timeout(timeout_s):
            return await self.process.wait()

    async def __aenter__(self) -> Self:
        with self.log_path.open("ab") as out:
            self._process = await asyncio.create_subprocess_exec(
                *self._argv, stdout=out, stderr=asyncio.subprocess.STDOUT,
                stdin=asyncio.subprocess.DEVNULL, cwd=self._cwd,
                env={**os.environ, **self._env} if self._env else None)
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        if self._process is not None and self._process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self._process.kill()
            await self._process.wait()


async def second_pod_until_done(bootstrap: str, topic: str, group: str, *,
                                counterparty: RecordingCounterparty, expected: set[str],
                                log_path: Path, **flags: str | int) -> None:
    """A second `waitline dispatch` joins the group; once the pods have committed everything
    and every Idempotency-Key in `expected` was called, it is stopped (SIGTERM, exit 0)."""
    argv = dispatch_argv(input_topic=topic, group=group, counterparty_url=counterparty.url,
                         bootstrap_servers=bootstrap, commit_interval="200ms", **flags)
    async with DispatcherProcess(argv, log_path) as second:
        await wait_until(lambda: fully_committed(bootstrap, group, topic),
                         "the two pods commit everything", timeout_s=90)
        await wait_until(lambda: set(counterparty.calls_per_key()) >= expected,
                         "every record is called", timeout_s=30)
        second.send(signal.SIGTERM)
        assert await second.wait(40) == 0, second.log()[-3000:]


def pod_settings(bootstrap: str, input_topic: str, group: str, counterparty_url: str,
                 **flags: Any) -> DispatchSettings:
    """Settings for a pod under test: quick commits, everything else as given."""
    return load_settings(input_topic=input_topic, group=group, counterparty_url=counterparty_url,
                         bootstrap_servers=bootstrap, **{"commit_interval": "200ms", **flags})
