"""The crash-and-reconcile show of `make demo`: kill -9 the pod mid-load, restart it, let the
reconciliation job expire what the crash left open, and account for every record.

Every step runs the real commands as subprocesses (`waitline dispatch`, `waitline reconcile
--once`, `waitline registry stats`, `waitline dlq stats`), so the show exercises exactly what an
operator would run.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import aiohttp

from dispatcher.devstack.stack import free_port
from dispatcher.errors import WaitlineError
from loadtest.compare import (
    HarnessError,
    create_topic,
    get_json,
    get_metrics,
    spawn,
    stop,
    wait_http,
)
from loadtest.generator import produce
from loadtest.measure import metric_sum

RECORDS = 2_000
CONCURRENCY = 100
# 5% of calls hang past the deadline: those the crash catches in flight for longer than one
# commit interval are past the committed offset, so nobody re-fetches them — only the registry
# knows them, and reconciliation expires them to the DLQ.
MODEL = "fixed:200+hang:0.05"
DEADLINE = "10s"
WAIT_EXPIRATION_S = 15.0
KILL_AFTER_FINISHED = 600


@dataclass
class CrashReport:
    records: int
    called_keys: int
    duplicate_calls: int
    open_after_restart: int
    expired_to_dlq: int
    timed_out_to_dlq: int
    unaccounted_max: int

    def lines(self) -> list[str]:
        return [
            f"input records:                         {self.records:,}",
            f"distinct records called:               {self.called_keys:,}",
            f"calls repeated after the crash:        {self.duplicate_calls:,} "
            "(same Idempotency-Key; bounded by the window)",
            f"wait records left open by the crash:   {self.open_after_restart:,}",
            f"expired to the DLQ by reconciliation:  {self.expired_to_dlq:,} "
            "(Exception=ExpiredRecordException)",
            f"timed out to the DLQ by the pod:       {self.timed_out_to_dlq:,} "
            "(Exception=TimeoutError: the hanging calls)",
            f"records neither called nor in the DLQ: at most {self.unaccounted_max:,}",
        ]


def _waitline(*args: str, timeout_s: float = 600) -> str:
    result = subprocess.run([sys.executable, "-m", "dispatcher", *args], capture_output=True,
                            text=True, timeout=timeout_s, check=False, env=dict(os.environ))
    if result.returncode != 0:
        raise HarnessError(f"`waitline {' '.join(args)}` failed ({result.returncode}):\n"
                           f"{result.stderr[-3000:]}")
    return result.stdout


async def run_crash_demo(bootstrap: str, work_dir: Path,
                         say: Callable[[str], None]) -> CrashReport:
    await asyncio.to_thread(work_dir.mkdir, parents=True, exist_ok=True)
    tag = f"crashdemo-{time.time_ns() % 10**9}"
    topic, group = tag, tag
    await create_topic(bootstrap, topic)
    await produce(bootstrap, topic, RECORDS, progress=False)
    say(f"produced {RECORDS:,} records to {topic}")

    mock_port = free_port()
    mock = spawn(["loadtest", "counterparty", "--model", MODEL, "--port", str(mock_port)],
                  work_dir / f"{tag}-mock.log")
    mock_url = f"http://127.0.0.1:{mock_port}/"

    def pod_args(metrics_port: int) -> list[str]:
        return ["dispatch", "--input-topic", topic, "--group", group, "--counterparty-url",
                mock_url, "--concurrency", str(CONCURRENCY), "--deadline", DEADLINE,
                "--wait-expiration", f"{WAIT_EXPIRATION_S:g}s", "--bootstrap-servers",
                bootstrap, "--metrics-port", str(metrics_port)]

    try:
        async with aiohttp.ClientSession() as session:
            await wait_http(session, f"{mock_url}stats", mock, work_dir / f"{tag}-mock.log")
            first_port = free_port()
            first = spawn(pod_args(first_port), work_dir / f"{tag}-pod1.log")
            url = f"http://127.0.0.1:{first_port}/metrics"
            await wait_http(session, url, first, work_dir / f"{tag}-pod1.log")
            while True:  # polling another process's metrics: there is no event to wait on
                finished = metric_sum(await get_metrics(session, url),
                                      "waitline_records_finished_total")
                if finished >= KILL_AFTER_FINISHED:
                    break
                await asyncio.sleep(0.1)
            first.send_signal(signal.SIGKILL)
            first.wait()
            say(f"kill -9 of the pod after {KILL_AFTER_FINISHED:,} records finished "
                f"({CONCURRENCY} in flight)")

            second_port = free_port()
            second = spawn(pod_args(second_port), work_dir / f"{tag}-pod2.log")
            url = f"http://127.0.0.1:{second_port}/metrics"
            await wait_http(session, url, second, work_dir / f"{tag}-pod2.log")
            await _wait_until_caught_up(session, url)
            stop(second)
            say("restarted pod caught up and stopped (SIGTERM)")
            stats = await get_json(session, f"{mock_url}stats")
    finally:
        stop(mock)

    await asyncio.sleep(WAIT_EXPIRATION_S)
    say("running `waitline reconcile --once` (Spark: mirror the wait topic, expire)…")
    await asyncio.to_thread(_waitline, "reconcile", "--group", group, "--once",
                            "--bootstrap-servers", bootstrap, "--checkpoint",
                            str(work_dir / f"{tag}-checkpoint"))
    registry = json.loads(await asyncio.to_thread(_waitline, "registry", "stats", "--json",
                                                  "--wait-topic", f"{group}.wait"))
    dlq = json.loads(await asyncio.to_thread(_waitline, "dlq", "stats", "--group", group,
                                             "--bootstrap-servers", bootstrap, "--json"))
    expired = int(dlq.get("by_exception", {}).get("ExpiredRecordException", 0))
    open_rows = sum(int(row["open"]) + int(row["sent_awaiting_tombstone"]) for row in registry)
    called = int(str(stats["distinct_keys"]))
    return CrashReport(records=RECORDS, called_keys=called,
                       duplicate_calls=int(str(stats["duplicate_requests"])),
                       open_after_restart=open_rows, expired_to_dlq=expired,
                       timed_out_to_dlq=int(dlq.get("by_exception", {}).get("TimeoutError", 0)),
                       unaccounted_max=max(0, RECORDS - called - expired))


async def _wait_until_caught_up(session: aiohttp.ClientSession, url: str,
                                timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    quiet = 0
    while time.monotonic() < deadline:
        metrics = await get_metrics(session, url)
        done = (metric_sum(metrics, "waitline_in_flight") == 0
                and metric_sum(metrics, "waitline_committed_offset_lag") == 0
                and metric_sum(metrics, "waitline_records_fetched_total") > 0)
        quiet = quiet + 1 if done else 0
        if quiet >= 3:
            return
        await asyncio.sleep(1)
    raise WaitlineError(f"the restarted pod did not catch up within {timeout_s:.0f} s")
