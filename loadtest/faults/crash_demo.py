"""The crash-and-reconcile show of `make demo`: kill -9 the pod mid-load, restart it, let the
reconciliation job expire what the crash left open, and account for every record.

The pods, the mock counterparty and the reconciliation job run as the real commands
(`waitline dispatch`, `waitline loadtest counterparty --record-keys`, `waitline reconcile
--once`). The account is taken from outside the pod, record by record
(`loadtest.harness.accounting`): calls per Idempotency-Key at the counterparty, the wait topic
and the committed offsets right after the kill, and the DLQ and the wait topic at the end.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import aiohttp

from dispatcher.errors import WaitlineError
from dispatcher.pod.window import most_open
from dispatcher.ports import free_port
from loadtest.harness.accounting import Account, AtTheKill, Observed, Outcome, account
from loadtest.harness.measure import metric_sum
from loadtest.harness.observe import (
    calls_by_key,
    committed_offsets,
    input_records,
    read_dlq_exceptions,
    read_wait_topic,
)
from loadtest.harness.processes import (
    HarnessError,
    child_env,
    get_metrics,
    spawn,
    spawn_mock,
    stop,
    wait_http,
)
from loadtest.harness.topics import create_topic
from loadtest.mock.generator import produce

RECORDS = 2_000
CONCURRENCY = 100
# 5% of calls hang past the deadline: those the crash catches in flight below the committed
# offset are never fetched again — only the registry knows them, and reconciliation expires
# them to the DLQ.
MODEL = "fixed:200+hang:0.05"
DEADLINE = "10s"
WAIT_EXPIRATION_S = 15.0
KILL_AFTER_FINISHED = 600


@dataclass(frozen=True)
class CrashReport:
    records: int
    account: Account

    @property
    def ok(self) -> bool:
        return not self.account.violations

    def lines(self) -> list[str]:
        acc = self.account
        # The demo kills once and knows its pod's limit: both are always set here.
        bound, most_open = acc.bound or 0, acc.most_open or 0
        dlq = ", ".join(f"{name} {count:,}" for name, count in acc.dlq_by_exception.items())
        lines = [f"input records:                      {self.records:,}, each by its wait id:"]
        lines += [f"  {outcome.value + ':':<33}{acc.count(outcome):,}" for outcome in Outcome]
        lines += [
            f"DLQ records by exception:          {dlq or 'none'}",
            f"records called more than once:     {len(acc.repeated):,} "
            f"({acc.extra_calls:,} repeated calls, same Idempotency-Key)",
            f"bound on repeated calls:           {bound:,} = window {acc.window:,} + "
            f"{len(acc.prepared_since_commit):,} records prepared since the last commit",
            f"in flight at the kill:             {acc.in_flight_at_kill:,} (at most "
            f"{most_open:,}: window {acc.window:,}, records prepared ahead, tombstones "
            f"behind it)",
            "every repeat was prepared since the last commit: "
            + ("yes" if acc.repeated <= acc.prepared_since_commit else "NO"),
        ]
        lines += ["check: OK, no record lost, repeats within the bound"] if self.ok else [
            f"check FAILED: {violation}" for violation in acc.violations]
        return lines


def _waitline(*args: str, timeout_s: float = 600) -> str:
    result = subprocess.run([sys.executable, "-m", "dispatcher", *args], capture_output=True,
                            text=True, timeout=timeout_s, check=False, env=child_env())
    if result.returncode != 0:
        raise HarnessError(f"`waitline {' '.join(args)}` failed ({result.returncode}):\n"
                           f"{result.stderr[-3000:]}")
    return result.stdout


async def run_crash_demo(bootstrap: str, work_dir: Path,
                         say: Callable[[str], None]) -> CrashReport:
    await asyncio.to_thread(work_dir.mkdir, parents=True, exist_ok=True)
    tag = f"crashdemo-{time.time_ns() % 10**9}"
    topic, group = tag, tag
    wait_topic, dlq_topic = f"{group}.wait", f"{group}.dlq"
    await create_topic(bootstrap, topic)
    await produce(bootstrap, topic, RECORDS, progress=False)
    say(f"produced {RECORDS:,} records to {topic}")

    mock = spawn_mock(MODEL, work_dir / f"{tag}-mock.log", "--record-keys")
    mock_url = mock.url

    def pod_args(metrics_port: int) -> list[str]:
        return ["dispatch", "--input-topic", topic, "--group", group, "--counterparty-url",
                mock_url, "--concurrency", str(CONCURRENCY), "--deadline", DEADLINE,
                "--wait-expiration", f"{WAIT_EXPIRATION_S:g}s", "--bootstrap-servers",
                bootstrap, "--metrics-port", str(metrics_port)]

    try:
        async with aiohttp.ClientSession() as session:
            await mock.answering(session)
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
                f"(window {CONCURRENCY})")
            # What the restarted pod will start from, and what the dead one left behind.
            at_kill_wait = await read_wait_topic(bootstrap, wait_topic)
            at_kill = AtTheKill(committed=await committed_offsets(bootstrap, group, topic),
                                prepared=at_kill_wait.seen, closed=at_kill_wait.closed)

            second_port = free_port()
            second = spawn(pod_args(second_port), work_dir / f"{tag}-pod2.log")
            url = f"http://127.0.0.1:{second_port}/metrics"
            await wait_http(session, url, second, work_dir / f"{tag}-pod2.log")
            await _wait_until_caught_up(session, url)
            stop(second)
            say("restarted pod caught up and stopped (SIGTERM)")
            calls = await calls_by_key(session, mock_url)
    finally:
        stop(mock.process)

    await asyncio.sleep(WAIT_EXPIRATION_S)
    say("running `waitline reconcile --once` (Spark: mirror the wait topic, expire)…")
    await asyncio.to_thread(_waitline, "reconcile", "--group", group, "--once",
                            "--bootstrap-servers", bootstrap, "--checkpoint",
                            str(work_dir / f"{tag}-checkpoint"))
    inputs = await input_records(bootstrap, group, topic)
    observed = Observed(
        inputs=inputs, window=CONCURRENCY, most_open=most_open(CONCURRENCY), kills=(at_kill,),
        calls=calls,
        dlq=await read_dlq_exceptions(bootstrap, dlq_topic, group),
        open_at_end=(await read_wait_topic(bootstrap, wait_topic)).open,
    )  # fmt: skip
    return CrashReport(records=len(inputs), account=account(observed))


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
