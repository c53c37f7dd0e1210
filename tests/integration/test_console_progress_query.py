"""A redrive's progress query (`dispatcher.console.trends`), its floor-of-epoch form against
its date_bin form on the real PostgreSQL, at the redrive cap (100,000 rows of one redrive):
the same buckets and counts, and each one's time side by side (printed, not asserted: the
machine is shared; docs/BENCHMARKS.md records them). Costs about 10 s (the rows' insert)."""

from __future__ import annotations

import random
import statistics
import time
import uuid
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

from dispatcher.console import trends

pytestmark = pytest.mark.integration

ROWS = 100_000  # WAITLINE_CONSOLE_MAX_REDRIVE_RECORDS' default
FLOOR_FORM = """
SELECT floor(extract(epoch FROM replayed_at - %s) / %s)::bigint AS bucket, count(*) AS records
FROM dlq_replay WHERE replay_id = %s GROUP BY 1 ORDER BY 1
"""


def _fill(dsn: str, replay_id: uuid.UUID, started: datetime, span_s: float) -> None:
    """ROWS replays of one redrive at random microseconds over `span_s`, and one at the start
    of every bucket exactly (where a float division may round down)."""
    rng = random.Random(41)
    width = trends.bucket_s(started, started + timedelta(seconds=span_s))
    stamps = [started + timedelta(microseconds=rng.randrange(int(span_s * 1e6)))
              for _ in range(ROWS - trends.PROGRESS_BUCKETS)]
    stamps += [started + timedelta(seconds=i * width) for i in range(trends.PROGRESS_BUCKETS)]
    dlq_topic = f"bench-{replay_id.hex[:12]}.dlq"
    with psycopg.connect(dsn) as conn, conn.cursor() as cur:
        cur.execute("INSERT INTO dlq_redrive (replay_id, dlq_topic, actor, role, filter, "
                    "planned, state) VALUES (%s, %s, 't', 'operator', '{}', %s, 'done')",
                    [replay_id, dlq_topic, ROWS])
        with cur.copy("COPY dlq_replay (dlq_topic, dlq_partition, dlq_offset, target_topic, "
                      "target_partition, target_offset, replayed_at, replay_id) "
                      "FROM STDIN") as copy:
            for offset, stamp in enumerate(stamps):
                copy.write_row((dlq_topic, 0, offset, "orders", 0, offset, stamp, replay_id))
        cur.execute("ANALYZE dlq_replay")


@pytest.mark.parametrize("span_s", [51.6, 3600.0, 7.0])  # the bench's redrive; an hour; < 120 s
def test_the_date_bin_progress_query_counts_as_the_floor_form_does(
        pg_dsn: str, span_s: float) -> None:
    replay_id = uuid.uuid4()
    started = datetime(2026, 11, 27, 3, 0, 0, 123_457, tzinfo=UTC)
    _fill(pg_dsn, replay_id, started, span_s)
    width = trends.bucket_s(started, started + timedelta(seconds=span_s))
    args = [started, width, replay_id]
    timings: dict[str, list[float]] = {"floor": [], "date_bin": []}
    results = {}
    with psycopg.connect(pg_dsn) as conn:
        for _ in range(5):  # side by side, alternating
            for name, sql in (("floor", FLOOR_FORM), ("date_bin", trends.PROGRESS)):
                begun = time.perf_counter()
                rows = conn.execute(sql.encode(), trends.progress_args(started, width,
                                                                       replay_id)
                                    if name == "date_bin" else args).fetchall()
                timings[name].append(time.perf_counter() - begun)
                results[name] = [(int(b), int(n)) for b, n in rows]
    assert sum(n for _, n in results["date_bin"]) == ROWS
    assert results["date_bin"] == results["floor"]
    print(f"\nprogress query, {ROWS} rows over {span_s} s: " + ", ".join(
        f"{name} median {statistics.median(t) * 1000:.0f} ms (min {min(t) * 1000:.0f})"
        for name, t in timings.items()))
