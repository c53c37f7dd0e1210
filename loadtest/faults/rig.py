"""The fault suite's rig: real `waitline dispatch` pods and a real mock counterparty as
processes, and everything the account needs read from outside them (calls per Idempotency-Key at
the counterparty, the wait topic and the DLQ from Kafka, the group's committed offsets sampled
over time for commit stalls and recovery times)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Self

import aiohttp
from aiokafka import AIOKafkaConsumer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError

from dispatcher.ports import free_port
from loadtest.harness.accounting import Account, Allowed, AtTheKill, Observed, account
from loadtest.harness.clients import client_options
from loadtest.harness.observe import (
    committed_offsets,
    end_offsets,
    input_records,
    read_dlq_exceptions,
    read_wait_topic,
)
from loadtest.harness.processes import (
    HarnessError,
    mock_calls_seen,
    mock_url,
    spawn,
    spawn_mock,
    stop,
)

SAMPLE_EVERY_S = 0.5
_UNANSWERED = (KafkaError, OSError, asyncio.TimeoutError)  # a question Kafka did not answer
NOTE_RETRY_S = 60.0  # noting a fault asked again after a retriable Kafka error


@dataclass
class CommitWatch:
    """The group's committed offsets and the topic's end, summed over partitions, sampled."""

    bootstrap: str
    group: str
    topic: str
    samples: list[tuple[float, int, int]] = field(default_factory=list)  # (t, committed, end)

    async def run(self) -> None:
        options = client_options(self.bootstrap, "waitline-chaos")
        admin = AIOKafkaAdminClient(**options)
        consumer = AIOKafkaConsumer(**options, enable_auto_commit=False)
        try:
            await admin.start()
            await consumer.start()
            end = 0  # as last read: it only grows, so an old one understates what is uncommitted
            while True:
                with contextlib.suppress(*_UNANSWERED):
                    async with asyncio.timeout(5):
                        offsets = await admin.list_consumer_group_offsets(self.group)
                    ours = [tp for tp in offsets if tp.topic == self.topic]
                    committed, at = sum(max(offsets[tp].offset, 0) for tp in ours), time.monotonic()
                    # Read apart: a partition whose leader is down (or cannot be replaced, with
                    # two of three nodes down) has no end to read while the coordinator answers.
                    with contextlib.suppress(*_UNANSWERED):
                        async with asyncio.timeout(5):
                            end = sum((await consumer.end_offsets(ours)).values()) if ours else 0
                    self.samples.append((at, committed, end))
                await asyncio.sleep(SAMPLE_EVERY_S)
        finally:
            await consumer.stop()
            await admin.close()

    def committed_now(self) -> int:
        return self.samples[-1][1] if self.samples else 0

    def max_stall_s(self) -> float:
        """The longest time the committed total stood still while records were uncommitted."""
        longest, since = 0.0, None
        for (t, committed, end), (_t0, before, _e0) in zip(self.samples[1:], self.samples,
                                                             strict=False):
            if committed == before and committed < end:
                since = since if since is not None else _t0
                longest = max(longest, t - since)
            else:
                since = None
        return longest

    def recovery_s(self, fault_ended_at: float) -> float | None:
        """From the end of a fault to the first commit that moved past it; None if none did."""
        before = [c for t, c, _ in self.samples if t <= fault_ended_at]
        baseline = before[-1] if before else 0
        moved = [t for t, c, _ in self.samples if t > fault_ended_at and c > baseline]
        return moved[0] - fault_ended_at if moved else None


class Rig:
    """One scenario's processes and topics: `async with Rig(...) as rig:`."""

    def __init__(self, bootstrap: str, work_dir: Path, tag: str, *, model: str,
                 say: Callable[[str], None]) -> None:
        self.bootstrap, self.work_dir, self.tag, self.say = bootstrap, work_dir, tag, say
        self.topic = self.group = tag
        self.model = model
        self.mock_port = free_port()
        self.mock_url = mock_url(self.mock_port)
        self.watch = CommitWatch(bootstrap, self.group, self.topic)
        self.kills: list[AtTheKill] = []
        self.pods: dict[str, subprocess.Popen[bytes]] = {}
        self.exits: dict[str, int] = {}  # pod name -> exit code, for pods stopped or dead
        self.problems: list[str] = []  # what a fault saw the pod do wrong, besides the account
        self._mock: subprocess.Popen[bytes] | None = None
        self._mock_starts = 0
        self._calls: Counter[str] = Counter()  # of mock processes already stopped
        self._session = aiohttp.ClientSession()
        # What this rig starts, ended on every way out (an exception, a cancellation such as
        # pytest-timeout's, a failed start), each step even when one before it fails: first
        # the processes, in reverse order and before anything is awaited (so a coroutine
        # closed without running on still stops them), then the tasks and the HTTP session.
        self._processes = contextlib.ExitStack()
        self._tasks = contextlib.AsyncExitStack()
        self._tasks.push_async_callback(self._session.close)

    async def __aenter__(self) -> Self:
        try:
            await asyncio.to_thread(self.work_dir.mkdir, parents=True, exist_ok=True)
            await self.start_mock()
        except BaseException as exc:
            await self._end(type(exc), exc, exc.__traceback__)
            raise
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self._end(exc_type, exc, tb)

    async def _end(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                   tb: TracebackType | None) -> None:
        try:
            self._processes.__exit__(exc_type, exc, tb)
        finally:
            await self._tasks.__aexit__(exc_type, exc, tb)

    def spawn(self, args: list[str], log: Path, stop_timeout_s: float = 20.0,
              ) -> subprocess.Popen[bytes]:
        """`waitline <args>` as a process of this rig: stopped (SIGTERM, then SIGKILL after
        `stop_timeout_s`) when the rig ends, if it still runs."""
        process = spawn(args, log)
        self._processes.callback(stop, process, stop_timeout_s)
        return process

    def watch_commits(self) -> None:
        """Sample the group's commits until the rig ends. A watch that failed (Kafka not
        answering as it started) fails a scenario that otherwise ended well, since its figures
        would be missing; under a scenario's own error it is only said."""
        task = asyncio.create_task(self.watch.run(), name=f"{self.tag}-watch")

        async def end(exc_type: type[BaseException] | None, exc: BaseException | None,
                      tb: TracebackType | None) -> None:
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
            except Exception as failed:
                if exc is None:
                    raise HarnessError(f"{self.tag}: the commit watch failed: {failed!r}") \
                        from failed
                self.say(f"  (the commit watch had failed too: {failed!r})")

        self._tasks.push_async_exit(end)

    def _calls_file(self) -> Path:
        """Where the current counterparty process writes its final calls per key."""
        return self.work_dir / f"{self.tag}-mock{self._mock_starts}-calls.json"

    async def start_mock(self) -> None:
        self._mock_starts += 1
        log = self.work_dir / f"{self.tag}-mock{self._mock_starts}.log"
        mock = spawn_mock(self.model, log, "--record-keys", "--calls-file",
                          str(self._calls_file()), port=self.mock_port, spawner=self.spawn)
        self._mock = mock.process
        await mock.answering(self._session)

    async def stop_mock(self) -> None:
        """Stop the counterparty (its port then refuses connections), keeping its calls: the
        final count it writes once stopped (a call can arrive until then)."""
        if self._mock is not None:
            await asyncio.to_thread(stop, self._mock)
            if self._mock.returncode != 0:
                raise HarnessError(f"{self.tag}: the mock counterparty exited with "
                                   f"{self._mock.returncode}; see {self.work_dir}")
            text = await asyncio.to_thread(self._calls_file().read_text)
            self._calls.update({str(k): int(n) for k, n in json.loads(text)["calls"].items()})
            self._mock = None

    async def calls_seen(self) -> int:
        """Calls the current counterparty process has seen (arrivals)."""
        return await mock_calls_seen(self._session, self.mock_url)

    async def wait_for_calls(self, at_least: int, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while (seen := await self.calls_seen()) < at_least:
            if time.monotonic() > deadline:
                raise HarnessError(f"{self.tag}: {seen} calls after {timeout_s:.0f} s, expected "
                                   f"{at_least}; see {self.work_dir}")
            self.check_pods_alive()
            await asyncio.sleep(0.1)

    def start_pod(self, name: str, *flags: str) -> None:
        argv = ["dispatch", "--input-topic", self.topic, "--group", self.group,
                "--counterparty-url", self.mock_url, "--bootstrap-servers", self.bootstrap,
                "--commit-interval", "500ms", *flags]
        pod = self.pods[name] = spawn(argv, self.work_dir / f"{self.tag}-{name}.log")
        self._processes.callback(_killed, pod)

    def check_pods_alive(self) -> None:
        for name, pod in self.pods.items():
            if pod.poll() is not None:
                log = self.work_dir / f"{self.tag}-{name}.log"
                raise HarnessError(f"{self.tag}: pod {name} exited with {pod.returncode} "
                                   f"unasked; see {log}")

    async def kill_pod(self, name: str) -> None:
        """kill -9, then note what the next pod starts from and what this one left behind."""
        pod = self.pods.pop(name)
        pod.send_signal(signal.SIGKILL)
        await asyncio.to_thread(pod.wait)
        self.exits[name] = pod.returncode
        await self.note_fault()

    async def note_fault(self) -> AtTheKill:
        """Note what Kafka holds at a fault the pod lives through (a broker killed, frozen,
        restarted): like a pod's kill, a fault may end in a rebalance that fetches again from
        the committed offset, so it adds its window and the records prepared since the last
        commit to the bound on repeated calls."""
        # The offsets first: a live pod may commit past records it prepares after the wait
        # topic was read, never past one it has not prepared. Asked again, both, after a
        # retriable error: just after a fault a leader or the group's coordinator may still be
        # moving (the cluster moves leaders back to nodes that return).
        deadline = time.monotonic() + NOTE_RETRY_S
        while True:
            try:
                committed = await committed_offsets(self.bootstrap, self.group, self.topic)
                wait = await read_wait_topic(self.bootstrap, f"{self.group}.wait")
                break
            except KafkaError as exc:
                if not exc.retriable or time.monotonic() > deadline:
                    raise
                self.say(f"  noting the fault again after {exc!r}")
                await asyncio.sleep(1.0)
        noted = AtTheKill(committed=committed, prepared=wait.seen, closed=wait.closed)
        self.kills.append(noted)
        return noted

    async def wait_joined(self, name: str, timeout_s: float = 60.0) -> None:
        """Until the pod has joined its group (a SIGTERM before its signal handlers are set
        would just end the process, which is no test of the pod)."""
        log, deadline = self.work_dir / f"{self.tag}-{name}.log", time.monotonic() + timeout_s
        while "partitions assigned" not in await asyncio.to_thread(log.read_text,
                                                                   errors="replace"):
            if time.monotonic() > deadline:
                raise HarnessError(f"{self.tag}: pod {name} did not join its group within "
                                   f"{timeout_s:.0f} s; see {log}")
            self.check_pods_alive()
            await asyncio.sleep(0.2)

    async def stop_pod(self, name: str, timeout_s: float = 90.0) -> int:
        """SIGTERM once the pod has joined; its exit code (also kept in `exits`)."""
        await self.wait_joined(name)
        pod = self.pods.pop(name)
        pod.send_signal(signal.SIGTERM)
        try:
            code = await asyncio.to_thread(pod.wait, timeout_s)
        except subprocess.TimeoutExpired:
            pod.kill()
            code = await asyncio.to_thread(pod.wait)
        self.exits[name] = code
        return code

    async def wait_fully_committed(self, timeout_s: float) -> None:
        """Until the group has committed every partition to its end (production is over)."""
        ends = await end_offsets(self.bootstrap, self.topic)
        deadline = time.monotonic() + timeout_s
        while True:
            committed = await committed_offsets(self.bootstrap, self.group, self.topic)
            if all(committed.get(p, 0) >= end for p, end in ends.items()):
                return
            if time.monotonic() > deadline:
                raise HarnessError(f"{self.tag}: not fully committed after {timeout_s:.0f} s "
                                   f"(committed {committed}, ends {ends})")
            self.check_pods_alive()
            await asyncio.sleep(0.5)

    async def account(self, window: int, allowed: Allowed) -> tuple[int, Account]:
        await self.stop_mock()
        inputs = await input_records(self.bootstrap, self.group, self.topic)
        observed = Observed(
            inputs=inputs, window=window, kills=tuple(self.kills), calls=dict(self._calls),
            dlq=await read_dlq_exceptions(self.bootstrap, f"{self.group}.dlq", self.group),
            open_at_end=(await read_wait_topic(self.bootstrap, f"{self.group}.wait")).open)
        return len(inputs), account(observed, allowed)


def _killed(process: subprocess.Popen[bytes]) -> None:
    """kill -9 unless it has exited, and reap it."""
    if process.poll() is None:
        process.kill()
    process.wait()
