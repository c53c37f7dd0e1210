"""The console's benchmark (`waitline loadtest console-bench`, part of `make bench`).

1. The DLQ index, mirrored the way production fills it: `--records` DLQ records (FULL_RECORDS
   in `make bench`; five error classes, 12 original partitions, a week of timestamps) are
   produced to a DLQ topic of 8 partitions, then the reconciliation job mirrors them into
   `dlq_record` in one run of `waitline reconcile --group … --once` in a process of its own
   (its wall time, the JVM's start included, and the index batches' own time, from the job's
   log); the index must then hold every record, else the figures mean nothing. 1% of them are
   then marked replayed in the redrive ledger (by SQL: that is the ledger a redrive writes,
   not the index).
2. The DLQ browser over that index: the console's JSON API answers filtered lists (each filter
   kind, and keyset pages deep into the list) and the overview; then the overview as a page
   (its arrivals chart drawn) and the trends (DLQ arrivals of the week, the latest redrive's
   progress) as JSON and as a page; the figure is the server's own time per request (its
   `Server-Timing` header), p50/p95/max.
3. A bulk redrive of REDRIVE_RECORDS DLQ records (real Kafka) through the console's API at a
   rate cap: the sustained rate is measured from the live progress between 10% and 90% of the
   records, and the target topic is then read back from Kafka: every original exactly once.

Goals (issue 34): the filtered list <= 200 ms p95, the overview <= 500 ms p95, the redrive
within 5% of its cap, nothing lost or doubled. Figures are reported as measured, never asserted.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import re
import secrets
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import aiohttp
import psycopg
import typer
from aiohttp import web
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaError
from pydantic import SecretStr

from dispatcher.console.app import Console, build_app
from dispatcher.console.settings import ConsoleSettings, Credential, Role
from dispatcher.console.store import Store
from dispatcher.endpoints import resolve_bootstrap_servers, resolve_pg_dsn
from dispatcher.kafka.config import load_kafka_config
from dispatcher.wire import Failure, OutgoingRecord, SourceRecord, dlq_record
from loadtest.harness.clients import client_options
from loadtest.harness.processes import HarnessError

CLIENT_ID = "waitline-console-bench"
FULL_RECORDS = 1_000_000  # make bench
DEFAULT_RECORDS = 100_000  # `waitline loadtest console-bench` alone: a few minutes
DLQ_PARTITIONS = 8
SPREAD_MS = 7 * 86_400 * 1000  # the records' timestamps span a week back from now
REDRIVE_RECORDS = 100_000
REDRIVE_RATE = 2_000.0
REPEATS = 20
SECTION_START = "<!-- console-bench:start -->"
SECTION_END = "<!-- console-bench:end -->"
_CLASSES = ("TimeoutError", "HTTPStatusError", "ConnectionError", "ExpiredRecordException",
            "RecordTooLargeError")



class ConsoleBenchError(HarnessError):
    """The console benchmark could not measure: the index is incomplete, or the job failed."""


@dataclass
class Timings:
    """Server-side milliseconds per request, by what was asked."""

    samples: dict[str, list[float]] = field(default_factory=dict)

    def add(self, what: str, ms: float) -> None:
        self.samples.setdefault(what, []).append(ms)

    def all(self, prefix: str) -> list[float]:
        return [ms for what, values in self.samples.items() if what.startswith(prefix)
                for ms in values]


def p95(values: Sequence[float]) -> float:
    ordered = sorted(values)
    return ordered[max(0, round(0.95 * len(ordered)) - 1)]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def _console(dlq_topic: str, bootstrap: str, dsn: str,
                   token: str) -> tuple[web.AppRunner, str]:
    settings = ConsoleSettings(
        credentials={"bench": Credential(role=Role.OPERATOR, token=SecretStr(token))},
        port=_free_port(), max_rate=100_000)
    kafka = load_kafka_config(bootstrap, client_id=CLIENT_ID)
    console = Console(settings, dlq_topic, dlq_topic.removesuffix(".dlq") + ".wait", [], kafka,
                      Store(dsn))
    runner = web.AppRunner(build_app(console), access_log=None, shutdown_timeout=5)
    await runner.setup()
    await web.TCPSite(runner, settings.host, settings.port).start()
    return runner, f"http://{settings.host}:{settings.port}"


async def _timed(http: aiohttp.ClientSession, url: str, params: dict[str, str] | None = None,
                 *, page: bool = False) -> tuple[float, Any]:
    """The server's milliseconds for a GET of `url`, and its JSON (`page`: its HTML text)."""
    headers = {"Accept": "text/html"} if page else None
    async with http.get(url, params=params, headers=headers) as response:
        response.raise_for_status()
        body = await (response.text() if page else response.json())
        timing = response.headers["Server-Timing"]
    return float(timing.split("dur=")[1]), body


@dataclass(frozen=True)
class IndexFigures:
    """How the DLQ topic was filled and how the reconciliation job mirrored it."""

    records: int
    produce_s: float
    command: str
    wall_s: float  # the whole `waitline reconcile --once` process, the JVM's start included
    batches: int
    batches_s: float  # the DLQ index batches' own time, from the job's log
    indexed: int

    @property
    def wall_rate(self) -> float:
        return self.records / self.wall_s

    @property
    def batches_rate(self) -> float:
        return self.records / self.batches_s if self.batches_s else 0.0


def bench_dlq_record(ordinal: int, group: str, now_ms: int, records: int) -> OutgoingRecord:
    """The `ordinal`-th DLQ record of the bench (what the filters of `measure_browser` find)."""
    source = SourceRecord("orders", ordinal % 12, ordinal, f"order-{ordinal}".encode(),
                          f'{{"order": {ordinal}, "amount": {ordinal % 1000}}}'.encode(), (),
                          now_ms - ordinal * SPREAD_MS // records)
    failure = Failure(_CLASSES[ordinal % 5],
                      f"HTTP {400 + ordinal % 100}: failure number {ordinal}:")
    return dlq_record(source, group, failure, wait_id=uuid.UUID(_md5_hex(str(ordinal))))


async def produce_dlq(bootstrap: str, dlq_topic: str, records: int) -> float:
    """Create `dlq_topic` (and its group's empty wait topic, which the job checks) and write
    `records` bench DLQ records to it; returns the seconds the writes took."""
    group = dlq_topic.removesuffix(".dlq")
    admin = AIOKafkaAdminClient(**client_options(bootstrap, CLIENT_ID))
    await admin.start()
    try:
        await admin.create_topics([
            NewTopic(dlq_topic, DLQ_PARTITIONS, 1, topic_configs={"retention.ms": "-1"}),
            NewTopic(f"{group}.wait", 1, 1, topic_configs={"cleanup.policy": "compact"})])
    finally:
        await admin.close()
    started = time.monotonic()
    now_ms = int(time.time() * 1000)
    await produce_all(bootstrap, dlq_topic, (
        (bench_dlq_record(ordinal, group, now_ms, records), ordinal % DLQ_PARTITIONS,
         now_ms - ordinal * SPREAD_MS // records) for ordinal in range(records)))
    return time.monotonic() - started


async def produce_all(bootstrap: str, topic: str,
                      records: Iterable[tuple[OutgoingRecord, int | None, int | None]]) -> None:
    """Write each (record, partition, timestamp ms) to `topic` (None: the producer's choice),
    awaiting the acknowledgements 10,000 records at a time."""
    producer = AIOKafkaProducer(**client_options(bootstrap, CLIENT_ID), acks="all", linger_ms=20,
                                max_batch_size=512 * 1024)
    await producer.start()
    try:
        sends = []
        for record, partition, timestamp_ms in records:
            sends.append(await producer.send(topic, record.value, key=record.key,
                                             headers=list(record.headers), partition=partition,
                                             timestamp_ms=timestamp_ms))
            if len(sends) >= 10_000:
                await asyncio.gather(*sends)
                sends.clear()
        await asyncio.gather(*sends)
    finally:
        await producer.stop()


_BATCH_LOG = re.compile(r"DLQ index batch applied.*?\belapsed_s=([0-9.]+).*?\brecords=(\d+)")


def batch_times(log: str) -> list[tuple[float, int]]:
    """(seconds, records) of each DLQ index batch the job's log reports."""
    return [(float(m.group(1)), int(m.group(2))) for m in _BATCH_LOG.finditer(log)]


def mirror_index(bootstrap: str, dsn: str, dlq_topic: str, records: int) -> IndexFigures:
    """Run the reconciliation job once (`waitline reconcile --once`, a process of its own) to
    mirror `dlq_topic` into `dlq_record`; ConsoleBenchError unless every record is indexed."""
    group = dlq_topic.removesuffix(".dlq")
    with tempfile.TemporaryDirectory(prefix="waitline-console-bench-") as work:
        args = ["reconcile", "--group", group, "--once", "--bootstrap-servers", bootstrap,
                "--dsn", dsn, "--checkpoint", str(Path(work) / "checkpoint")]
        started = time.monotonic()
        done = subprocess.run([sys.executable, "-m", "dispatcher", *args], check=False,
                              capture_output=True, text=True)
        wall_s = time.monotonic() - started
    log = done.stdout + done.stderr
    if done.returncode != 0:
        tail = "\n".join(log.strip().splitlines()[-5:])
        raise ConsoleBenchError(f"waitline reconcile exited {done.returncode}: {tail}")
    batches = batch_times(log)
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM dlq_record WHERE dlq_topic = %s",
                           (dlq_topic,)).fetchone()
    indexed = int(row[0]) if row is not None else 0
    if indexed != records or sum(n for _s, n in batches) != records:
        raise ConsoleBenchError(f"the job indexed {indexed:,} of {records:,} DLQ records "
                                f"({sum(n for _s, n in batches):,} by its log)")
    command = f"waitline reconcile --group {group} --once"
    return IndexFigures(records, 0.0, command, wall_s, len(batches),
                        sum(s for s, _n in batches), indexed)


def mark_replayed(dsn: str, dlq_topic: str, records: int) -> None:
    """Mark 1% of the indexed records replayed in the redrive ledger (as a redrive would),
    then ANALYZE, as autovacuum would after a fill of this size."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        replay_id = uuid.uuid4()
        conn.execute("INSERT INTO dlq_redrive (replay_id, dlq_topic, actor, role, filter,"
                     " planned, sent, state) VALUES (%s, %s, 'bench', 'operator', '{}', %s, %s,"
                     " 'done')", (replay_id, dlq_topic, records // 100, records // 100))
        conn.execute("INSERT INTO dlq_replay SELECT dlq_topic, dlq_partition, dlq_offset,"
                     " 'orders', 0, dlq_offset, now(), %s FROM dlq_record WHERE dlq_topic = %s"
                     " AND dlq_offset %% 100 = 0 AND dlq_partition = 0",
                     (replay_id, dlq_topic))
        conn.execute("ANALYZE dlq_record")
        conn.execute("ANALYZE dlq_replay")


async def delete_topics(bootstrap: str, topics: Sequence[str]) -> None:
    """Remove the bench's topics (a failure here must not hide the one that ended the bench)."""
    admin = AIOKafkaAdminClient(**client_options(bootstrap, CLIENT_ID))
    with contextlib.suppress(KafkaError):
        await admin.start()
        try:
            await admin.delete_topics(list(topics))
        finally:
            await admin.close()


def drop_index(dsn: str, dlq_topic: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DELETE FROM dlq_replay WHERE dlq_topic = %s", (dlq_topic,))
        conn.execute("DELETE FROM dlq_redrive WHERE dlq_topic = %s", (dlq_topic,))
        conn.execute("DELETE FROM dlq_record WHERE dlq_topic = %s", (dlq_topic,))
        conn.execute("DELETE FROM dlq_hourly WHERE dlq_topic = %s", (dlq_topic,))


async def measure_browser(base: str, token: str, rows: int) -> Timings:
    """The filtered lists and the overview, REPEATS times each (after one warm-up)."""
    timings = Timings()
    headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
    hour_ago = datetime.fromtimestamp(time.time() - 2 * 86_400, tz=UTC)
    filters: dict[str, dict[str, str]] = {
        "list: none": {},
        "list: error class": {"exception": "HTTPStatusError"},
        "list: message text": {"message": "HTTP 404"},
        # One match in the whole index: the text search reads every row of the topic.
        "list: message text, one match": {"message": f"failure number {rows * 7 // 9}:"},
        "list: class + message": {"exception": "TimeoutError", "message": "failure number 12"},
        "list: original partition": {"original_topic": "orders", "original_partition": "7"},
        "list: key": {"key": f"order-{rows // 2}"},
        "list: wait id": {"wait_id": str(uuid.UUID(_md5_hex(str(rows // 3))))},
        "list: time range": {"since": hour_ago.isoformat(),
                             "until": hour_ago.replace(hour=(hour_ago.hour + 1) % 24).isoformat()
                             if hour_ago.hour < 23 else datetime.now(UTC).isoformat()},
        "list: not replayed": {"replayed": "no", "exception": "ConnectionError"},
        "list: replayed": {"replayed": "yes"},
    }
    async with aiohttp.ClientSession(headers=headers) as http:
        for what, params in filters.items():
            await _timed(http, f"{base}/dlq", params)  # warm-up
            for _ in range(REPEATS):
                ms, _body = await _timed(http, f"{base}/dlq", params)
                timings.add(what, ms)
        cursor: str | None = None
        for _ in range(REPEATS * 5):  # keyset pages, 100 deep
            params = {"exception": "TimeoutError"} | ({"before": cursor} if cursor else {})
            ms, body = await _timed(http, f"{base}/dlq", params)
            timings.add("list: keyset page, 100 deep", ms)
            cursor = body["next"]
        for what, path, page in (("overview", "/", False),
                                 ("overview, as a page (its chart drawn)", "/", True),
                                 ("trends", "/trends", False),
                                 ("trends, as a page (three charts drawn)", "/trends", True)):
            await _timed(http, f"{base}{path}", page=page)  # warm-up
            for _ in range(REPEATS):
                ms, _body = await _timed(http, f"{base}{path}", page=page)
                timings.add(what, ms)
    return timings


def _md5_hex(text: str) -> str:
    return hashlib.md5(text.encode(), usedforsecurity=False).hexdigest()


# -- the bulk redrive --------------------------------------------------------------------------

@dataclass
class RedriveFigures:
    records: int
    rate_cap: float
    plan_s: float
    sustained_rate: float
    total_s: float
    written: int
    distinct: int
    state: str


async def _fill_dlq(bootstrap: str, group: str, orders: str, count: int) -> None:
    admin = AIOKafkaAdminClient(**client_options(bootstrap, CLIENT_ID))
    await admin.start()
    try:
        await admin.create_topics([NewTopic(orders, 4, 1), NewTopic(f"{group}.dlq", 4, 1)])
    finally:
        await admin.close()
    failure = Failure("TimeoutError", "no answer within 60 s")
    await produce_all(bootstrap, f"{group}.dlq", (
        (dlq_record(SourceRecord(orders, i % 4, i, f"order-{i}".encode(),
                                 f'{{"order": {i}}}'.encode(), (), 1_700_000_000_000 + i),
                    group, failure), None, None) for i in range(count)))


async def count_topic(bootstrap: str, topic: str) -> Counter[bytes | None]:
    """How often each key was written to `topic` (committed records only)."""
    consumer = AIOKafkaConsumer(**client_options(bootstrap, CLIENT_ID), enable_auto_commit=False,
                                isolation_level="read_committed")
    await consumer.start()
    keys: Counter[bytes | None] = Counter()
    try:
        tps = [TopicPartition(topic, p) for p in range(4)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)
        while any([await consumer.position(tp) < ends[tp] for tp in tps]):
            for batch in (await consumer.getmany(timeout_ms=500, max_records=10_000)).values():
                keys.update(record.key for record in batch)
    finally:
        await consumer.stop()
    return keys


async def measure_redrive(bootstrap: str, dsn: str, records: int,
                          rate: float) -> RedriveFigures:
    suffix = secrets.token_hex(6)
    group, orders = f"console-bench-{suffix}", f"console-bench-orders-{suffix}"
    await _fill_dlq(bootstrap, group, orders, records)
    token = secrets.token_urlsafe(24)
    runner, base = await _console(f"{group}.dlq", bootstrap, dsn, token)
    headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
    try:
        async with aiohttp.ClientSession(headers=headers,
                                         timeout=aiohttp.ClientTimeout(total=None)) as http:
            started = time.monotonic()
            async with http.post(f"{base}/redrives/plan", json={}) as response:
                response.raise_for_status()
                plan = await response.json()
            plan_s = time.monotonic() - started
            async with http.post(f"{base}/redrives", json={
                    "plan_id": plan["plan_id"], "confirm": plan["records"], "rate": rate}) as r:
                r.raise_for_status()
                replay_id = (await r.json())["replay_id"]
            began = time.monotonic()
            progress: list[tuple[float, int]] = []
            while True:
                _ms, body = await _timed(http, f"{base}/redrives/{replay_id}")
                live = body["live"] or body["audit"]
                progress.append((time.monotonic(), int(live["sent"])))
                if body["audit"]["finished_at"] is not None:
                    state = body["audit"]["state"]
                    break
                await asyncio.sleep(0.5)
            total_s = time.monotonic() - began
    finally:
        await runner.cleanup()
    keys = await count_topic(bootstrap, orders)
    drop_index(dsn, f"{group}.dlq")
    return RedriveFigures(records, rate, plan_s, sustained(progress, records), total_s,
                          sum(keys.values()), len(keys), state)


def sustained(progress: Sequence[tuple[float, int]], records: int) -> float:
    """Records per second between the samples nearest 10% and 90% of `records`."""
    low = next((p for p in progress if p[1] >= records * 0.1), progress[0])
    high = next((p for p in progress if p[1] >= records * 0.9), progress[-1])
    if high[0] <= low[0]:
        return 0.0
    return (high[1] - low[1]) / (high[0] - low[0])


# -- the report --------------------------------------------------------------------------------

def section(index: IndexFigures, timings: Timings, redrive: RedriveFigures | None,
            command: str) -> str:
    measured = f"{datetime.now(UTC):%Y-%m-%d %H:%M}"
    lines = [SECTION_START, f"### Console (issue 34) — measured {measured} UTC",
             "", f"`{command}` (`make bench` runs it with `--records {FULL_RECORDS}`), on the "
             "shared 2-core machine (other people's tests ran at the same time).", "",
             f"**The index, mirrored by the reconciliation job.** {index.records:,} DLQ records "
             f"(five error classes, 12 original partitions, a week of timestamps) were produced "
             f"to a DLQ topic of {DLQ_PARTITIONS} partitions ({index.produce_s:.1f} s), then "
             f"`{index.command}` mirrored them into `dlq_record` in one process: "
             f"**{index.wall_s:.1f} s wall, {index.wall_rate:,.0f} records/s** (the JVM's start "
             f"and the empty wait topic's cycle included); its {index.batches} DLQ index "
             f"batches took {index.batches_s:.1f} s of that ({index.batches_rate:,.0f} "
             f"records/s by the job's log). The index then held {index.indexed:,} rows, every "
             "record once. 1% were then marked replayed in the redrive ledger (by SQL: the "
             "ledger a redrive writes, not the index).", "",
             "**The DLQ browser over that index.** Each request is timed by the console itself "
             f"(`Server-Timing`), {REPEATS} requests per row after one warm-up.", "",
             "| request | p50 ms | p95 ms | max ms |", "|---|---:|---:|---:|"]
    for what, values in timings.samples.items():
        lines.append(f"| {what} | {statistics.median(values):.1f} | {p95(values):.1f} | "
                     f"{max(values):.1f} |")
    lists = timings.all("list")
    overview = timings.all("overview")
    lines += ["", f"All filtered lists together: p95 {p95(lists):.1f} ms (goal <= 200 ms); "
              f"overview p95 {p95(timings.samples['overview']):.1f} ms, as JSON and as a page "
              f"together {p95(overview):.1f} ms (goal <= 500 ms).", ""]
    if redrive is not None:
        within = abs(redrive.sustained_rate - redrive.rate_cap) / redrive.rate_cap * 100
        lines += [
            f"Bulk redrive of {redrive.records:,} DLQ records at a cap of "
            f"{redrive.rate_cap:,.0f}/s through the console's API: dry run {redrive.plan_s:.1f}"
            f" s; sustained {redrive.sustained_rate:,.0f} records/s between 10% and 90% "
            f"({within:.1f}% from the cap; goal within 5%); {redrive.total_s:.1f} s in all, "
            f"state {redrive.state}. Read back from Kafka: {redrive.written:,} records, "
            f"{redrive.distinct:,} distinct originals (lost: {redrive.records - redrive.distinct:,}"
            f", doubled: {redrive.written - redrive.distinct:,}).", ""]
    lines.append(SECTION_END)
    return "\n".join(lines)


def record_section(out: Path, text: str) -> None:
    """Replace the console section of `out` (below `make bench`'s keep marker), or add it."""
    from loadtest.bench.report import KEEP_MARKER  # noqa: PLC0415

    current = out.read_text() if out.exists() else ""
    if SECTION_START in current and SECTION_END in current:
        head, rest = current.split(SECTION_START, 1)
        current = head + text + rest.split(SECTION_END, 1)[1]
    elif KEEP_MARKER in current:
        current = current.replace(KEEP_MARKER, f"{KEEP_MARKER}\n\n{text}\n", 1)
    else:
        current = f"{current}\n{KEEP_MARKER}\n\n{text}\n"
    out.write_text(current)


async def run(*, bootstrap_servers: str | None, dsn: str | None,
              records: int = DEFAULT_RECORDS, redrive_records: int = REDRIVE_RECORDS,
              redrive_rate: float = REDRIVE_RATE) -> tuple[IndexFigures, Timings,
                                                           RedriveFigures | None]:
    bootstrap = resolve_bootstrap_servers(bootstrap_servers)
    pg_dsn = resolve_pg_dsn(dsn)
    group = f"console-bench-index-{secrets.token_hex(4)}"
    dlq_topic = f"{group}.dlq"
    try:
        produce_s = await produce_dlq(bootstrap, dlq_topic, records)
        index = await asyncio.to_thread(mirror_index, bootstrap, pg_dsn, dlq_topic, records)
        index = dataclasses.replace(index, produce_s=produce_s)
        await asyncio.to_thread(mark_replayed, pg_dsn, dlq_topic, records)
        token = secrets.token_urlsafe(24)
        runner, base = await _console(dlq_topic, bootstrap, pg_dsn, token)
        try:
            timings = await measure_browser(base, token, records)
        finally:
            await runner.cleanup()
    finally:
        await asyncio.to_thread(drop_index, pg_dsn, dlq_topic)
        await delete_topics(bootstrap, [dlq_topic, f"{group}.wait"])
    redrive = (await measure_redrive(bootstrap, pg_dsn, redrive_records, redrive_rate)
               if redrive_records else None)
    return index, timings, redrive


def console_bench(
    *,
    out: Annotated[Path, typer.Option(help="Markdown report whose console section to "
                                           "(re)write.")] = Path("docs/BENCHMARKS.md"),
    records: Annotated[int, typer.Option(
        help=f"DLQ records produced and mirrored into the index (make bench: {FULL_RECORDS:,})."
        , min=1)] = DEFAULT_RECORDS,
    redrive_records: Annotated[int, typer.Option(
        help="DLQ records of the bulk redrive (0: none).", min=0)] = REDRIVE_RECORDS,
    redrive_rate: Annotated[float, typer.Option(help="The redrive's rate cap, records/s.",
                                                min=1)] = REDRIVE_RATE,
    bootstrap_servers: Annotated[str | None, typer.Option(
        help="Kafka bootstrap servers; default: the local stack.")] = None,
    dsn: Annotated[str | None, typer.Option(
        help="PostgreSQL DSN of the registry; default: the local stack.")] = None,
) -> None:
    """Benchmark the console: filtered lists and the overview over a large DLQ index, and a
    bulk redrive at a rate cap, counted from Kafka; rewrites the console section of OUT."""
    measured = asyncio.run(run(bootstrap_servers=bootstrap_servers, dsn=dsn, records=records,
                               redrive_records=redrive_records, redrive_rate=redrive_rate))
    command = (f"waitline loadtest console-bench --records {records} --redrive-records "
               f"{redrive_records} --redrive-rate {redrive_rate:g}")
    text = section(*measured, command=command)
    record_section(out, text)
    typer.echo(text)
