"""The load-test harness deletes the topics a run made, on the real broker: a long-lived local
broker filled with every run's topics ran out of file descriptors, and the next run's records
could not be written (docs/BENCHMARKS.md, issue 43's last section)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from aiokafka.admin import AIOKafkaAdminClient

from loadtest.bench.compare import run_one
from loadtest.bench.scenarios import RunSpec
from loadtest.harness.topics import create_topic, delete_run_topics, run_topic

pytestmark = pytest.mark.integration


async def _topics(bootstrap: str) -> set[str]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        return set(await admin.list_topics())
    finally:
        await admin.close()


async def _listed_once_gone(bootstrap: str, ours: Callable[[str], bool]) -> set[str]:
    """The topics listed once none that `ours` picks is (a deletion reaches the broker's
    metadata after the call returns); fails if one is still listed after 30 s."""
    deadline = time.monotonic() + 30
    while True:
        listed = await _topics(bootstrap)
        if not (left := {t for t in listed if ours(t)}):
            return listed
        assert time.monotonic() < deadline, f"still listed: {left}"
        await asyncio.sleep(0.2)


async def test_a_runs_topics_are_deleted_and_no_other_topic_is(
    kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    tag = unique_name("lt-run")
    made = [tag, f"{tag}.wait", f"{tag}.dlq", f"{tag}.wait.dlq"]
    other = f"{tag}-0"  # another run's name that only starts alike: kept
    for topic in [*made, other]:
        await create_topic(kafka_bootstrap, topic, partitions=1)

    assert await delete_run_topics(kafka_bootstrap, tag) == sorted(made)

    assert other in await _listed_once_gone(kafka_bootstrap, set(made).__contains__)


async def test_deleting_on_an_unreachable_broker_warns_and_names_nothing(
        caplog: pytest.LogCaptureFixture) -> None:
    """Called in a run's cleanup: it must not raise in place of the run's own outcome."""
    assert await delete_run_topics("127.0.0.1:9", "lt-nothing") == []
    assert "could not delete the topics of lt-nothing" in caplog.text


async def test_a_run_cut_off_while_it_writes_its_backlog_deletes_its_topic(
        kafka_bootstrap: str, unique_name: Callable[[str], str], tmp_path: Path) -> None:
    """A run stopped (Ctrl-C) while it writes its backlog, before its mock and its loop are
    up, still deletes the topic it made: the topic, its records written so far, is no use to
    any later run."""
    scenario = unique_name("cut")
    prefix = f"lt-{scenario}-"
    spec = RunSpec("at-least-once", 10, "fixed:100", 2_000_000, max_duration_s=60.0)
    run = asyncio.create_task(run_one(scenario, spec, kafka_bootstrap, tmp_path))
    deadline = time.monotonic() + 60
    while not any(t.startswith(prefix) for t in await _topics(kafka_bootstrap)):
        assert time.monotonic() < deadline and not run.done(), "the run made no topic"
        await asyncio.sleep(0.2)
    await asyncio.sleep(1.0)  # records on their way
    assert not run.done(), "the backlog was written already: nothing was cut off"
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run

    await _listed_once_gone(kafka_bootstrap, lambda t: t.startswith(prefix))


@pytest.mark.parametrize("keep", [False, True])
async def test_a_run_topic_is_deleted_when_its_run_fails_unless_kept(
        kafka_bootstrap: str, unique_name: Callable[[str], str], keep: bool) -> None:
    """`run_topic` makes the run's topic on entry; a run that fails inside it leaves no topic
    behind, unless asked to keep its topics (to look into them)."""
    tag = unique_name("lt-failed")

    async def failing_run() -> None:
        async with run_topic(kafka_bootstrap, tag, partitions=1, keep=keep):
            await create_topic(kafka_bootstrap, f"{tag}.wait", partitions=1)  # as a pod does
            assert {tag, f"{tag}.wait"} <= await _topics(kafka_bootstrap)
            raise RuntimeError("the run failed")

    with pytest.raises(RuntimeError, match="the run failed"):
        await failing_run()
    ours = {tag, f"{tag}.wait"}
    if keep:
        assert ours <= await _topics(kafka_bootstrap)
    else:
        await _listed_once_gone(kafka_bootstrap, ours.__contains__)
