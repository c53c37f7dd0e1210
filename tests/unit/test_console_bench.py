"""The console benchmark's pure parts: the DLQ records it produces index into the rows its
filters look for, the job's log is read for the index batches' time, and the report says how
the index was filled."""

from __future__ import annotations

import hashlib
import uuid

import pytest

from connectors.dlq_index import index_row
from loadtest.bench.console_bench import (
    FULL_RECORDS,
    SPREAD_MS,
    IndexFigures,
    Timings,
    batch_times,
    bench_dlq_record,
    section,
)

pytestmark = pytest.mark.unit

NOW_MS = 1_800_000_000_000


def test_a_bench_record_indexes_into_what_the_browser_filters_find() -> None:
    records = 1000
    record = bench_dlq_record(404, "console-bench-x", NOW_MS, records)
    row = index_row("console-bench-x.dlq", 4, 50, NOW_MS, key=record.key, value=record.value,
                    headers=list(record.headers))
    assert row.exception == "RecordTooLargeError"  # _CLASSES[404 % 5]
    assert row.message == "HTTP 404: failure number 404:"
    assert (row.original_topic, row.original_partition, row.original_offset) == ("orders", 8,
                                                                                  404)
    assert row.key_preview == "order-404"
    assert str(row.wait_id) == str(uuid.UUID(hashlib.md5(b"404").hexdigest()))
    last = bench_dlq_record(records - 1, "g", NOW_MS, records)
    assert last.value is not None and b'"order": 999' in last.value
    assert SPREAD_MS == 7 * 86_400 * 1000


def test_the_index_batches_are_read_from_the_jobs_log() -> None:
    log = (
        "2026-11-25 15:44:01 [info     ] mirror batch applied           batch_id=0 "
        "elapsed_s=4.078 events_in=3\n"
        "2026-11-25 15:44:02 [info     ] DLQ index batch applied        batch_id=0 "
        "dlq_topic=b.dlq elapsed_s=0.295 index_lag_s=1.318 records=8 records_per_s=27 "
        "written=8\n"
        "2026-11-25 15:44:04 [info     ] DLQ index batch applied        batch_id=1 "
        "dlq_topic=b.dlq elapsed_s=1.5 index_lag_s=None records=100000 records_per_s=66666 "
        "written=100000\n")
    assert batch_times(log) == [(0.295, 8), (1.5, 100_000)]


def test_the_report_says_the_job_mirrored_the_index() -> None:
    index = IndexFigures(records=1_000_000, produce_s=61.0, command="waitline reconcile "
                         "--group g --once", wall_s=200.0, batches=10, batches_s=150.0,
                         indexed=1_000_000)
    timings = Timings()
    for ms in (1.0, 2.0, 3.0):
        timings.add("list: none", ms)
        timings.add("overview", ms * 10)
    text = section(index, timings, None, command="waitline loadtest console-bench "
                                                 "--records 1000000")
    assert "mirrored by the reconciliation job" in text
    assert "`waitline reconcile --group g --once`" in text
    assert "200.0 s wall, 5,000 records/s" in text and "6,667 records/s" in text
    assert f"--records {FULL_RECORDS}" in text
    assert "filled by SQL" not in text
