"""A console redrive can always be stopped (on a virtual clock, `looptime`): abort and pause take
effect at once whatever the rate cap, the open transaction is committed before any long wait,
shutdown never waits on a sleeping redrive; and where a redrive may write (pure)."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from virtual_clock import run_virtual

from dispatcher.console.redrive import Redrive, RedriveLimits, RedriveManager
from dispatcher.console.store import Store
from dispatcher.dlq.targets import ReplayTargets
from dispatcher.errors import ConfigError
from dispatcher.kafka.config import KafkaClientSettings

pytestmark = pytest.mark.unit

SLOW = 1 / 600  # one record per ten minutes: slower than the console allows, on purpose
UNUSED = Store("postgresql://nobody@127.0.0.1:9/none")  # never reached by these tests


def _redrive(rate: float) -> Redrive:
    return Redrive(uuid.uuid4(), "payments.dlq", "alice", 10, rate, UNUSED)


@pytest.mark.parametrize("rate", [SLOW, 1.0, 5_000.0])
def test_an_abort_takes_effect_at_once_whatever_the_rate(rate: float) -> None:
    async def scenario() -> tuple[bool | None, float]:
        loop = asyncio.get_running_loop()
        run = _redrive(rate)
        assert await run.admit() is True  # the first record goes at once
        waiting = asyncio.create_task(run.admit())
        await asyncio.sleep(0.0001)
        run.abort()
        aborted_at = loop.time()
        verdict = await waiting
        return verdict, loop.time() - aborted_at

    verdict, took_s = run_virtual(scenario)
    assert verdict in (False, None, True) and took_s < 1.0
    if rate == SLOW:
        assert verdict is None  # woken by the abort, not by the rate


def test_a_pause_takes_effect_at_once_commits_first_and_a_resume_goes_on() -> None:
    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        run = _redrive(SLOW)
        assert await run.admit() is True
        assert run.will_wait()  # the next record is ten minutes away: commit before waiting
        waiting = asyncio.create_task(run.admit())
        await asyncio.sleep(5)
        run.pause()
        paused_at = loop.time()
        assert await waiting is None and loop.time() - paused_at < 1.0
        assert run.will_wait()  # paused: the replay commits before it asks again
        waiting = asyncio.create_task(run.admit())
        await asyncio.sleep(3600)  # a long pause sends nothing
        assert not waiting.done()
        run.resume()
        assert await waiting is None  # woken by the resume: ask again
        assert run.state == "running"
        run.abort()
        assert await run.admit() is False

    run_virtual(scenario)


def test_a_fast_rate_admits_without_waiting_and_keeps_its_cap() -> None:
    async def scenario() -> float:
        loop = asyncio.get_running_loop()
        run = _redrive(100.0)
        started = loop.time()
        for _ in range(201):
            while (verdict := await run.admit()) is None:
                pass
            assert verdict is True
        assert not run.will_wait()
        return loop.time() - started

    assert run_virtual(scenario) == pytest.approx(2.0, abs=0.05)  # 201 records at 100/s


def test_shutdown_never_waits_on_a_sleeping_redrive() -> None:
    async def scenario() -> float:
        loop = asyncio.get_running_loop()
        kafka = KafkaClientSettings(bootstrap_servers="127.0.0.1:9", client_id="t").kafka()
        manager = RedriveManager(kafka, UNUSED, RedriveLimits(),
                                 ReplayTargets.of("payments.dlq", "payments.wait", ()))
        sleeping, paused = _redrive(SLOW), _redrive(1.0)

        async def replay(run: Redrive) -> None:  # what execute_replay asks of its control
            while (verdict := await run.admit()) is not False:
                del verdict

        for run in (sleeping, paused):
            manager.watch(run, replay(run))
        await asyncio.sleep(1)
        paused.pause()
        await asyncio.sleep(1)
        closing = loop.time()
        await manager.close()
        return loop.time() - closing

    assert run_virtual(scenario) < 1.0


@pytest.mark.parametrize(("topic", "chosen", "why"), [
    ("payments.dlq", False, "the DLQ itself"), ("payments.dlq.replayed", False, "ledger"),
    ("payments.wait", False, "the wait topic"), ("__consumer_offsets", False, "Kafka-internal"),
    ("__transaction_state", True, "Kafka-internal"), ("bad topic!", False, "not a valid"),
    ("staging", True, "WAITLINE_CONSOLE_REDRIVE_TOPICS"), ("orders", False, None),
    ("orders-replay", True, None)])
def test_a_redrive_writes_only_original_or_allowed_topics(
        topic: str, chosen: bool, why: str | None) -> None:
    targets = ReplayTargets.of("payments.dlq", "payments.wait", ["orders-replay"])
    refusal = targets.refusal(topic, chosen=chosen)
    assert (refusal is None) == (why is None)
    assert why is None or why in (refusal or "")


@pytest.mark.parametrize("topic", ["payments.dlq", "payments.wait", "payments.dlq.replayed",
                                   "__consumer_offsets"])
def test_an_allowlist_naming_a_topic_never_written_is_refused_at_start(topic: str) -> None:
    with pytest.raises(ConfigError, match="never writes there"):
        ReplayTargets.of("payments.dlq", "payments.wait", ["orders", topic])
