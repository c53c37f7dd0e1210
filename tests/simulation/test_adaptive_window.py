"""`--concurrency auto` on the simulated Kafka (issue 11): against a counterparty that serves C
calls at a time (slower past C in flight, a retryable 503 past 2C), the window grows from its
minimum, settles between C and 2C, and the counterparty sheds almost nothing."""

from __future__ import annotations

import asyncio

from cases import committed_to_end
from oracle import check
from world import Call, World, quiet, simulate

from dispatcher.handlers.record import Record, Retryable
from loadtest.harness.measure import metric_sum, parse_metrics
from loadtest.mock.latency import ERROR_STATUS, parse_model

CAPACITY, BASE_MS, RECORDS, RUN_S, SETTLED_AFTER_S = 40, 100, 9_000, 24.0, 12.0


class CapacityCounterparty:
    """`fixed:100+capacity:40`, as the load test's mock counterparty serves it."""

    def __init__(self) -> None:
        self.model = parse_model(f"fixed:{BASE_MS}+capacity:{CAPACITY}")
        self.in_flight = self.requests = self.shed = 0

    async def __call__(self, _world: World, _call: Call, record: Record) -> bytes | None:
        self.in_flight += 1
        self.requests += 1
        try:
            decision = self.model.decide(record.value, self.in_flight)
            if decision.status == ERROR_STATUS:
                self.shed += 1
                raise Retryable("503 Service Unavailable (over twice the capacity)")
            await asyncio.sleep(decision.delay_s)
            return b"{}"
        finally:
            self.in_flight -= 1


def test_auto_settles_between_the_capacity_and_twice_it() -> None:
    windows: list[tuple[float, float]] = []  # (seconds since start, waitline_window)
    counterparty = CapacityCounterparty()

    async def sample(world: World) -> None:
        started = world.now
        metrics = world.log.pods[0].metrics
        while world.now - started <= RUN_S:
            exposed = parse_metrics(metrics.exposition().decode())
            windows.append((world.now - started, metric_sum(exposed, "waitline_window")))
            await asyncio.sleep(0.25)

    log = simulate(quiet({"concurrency": "auto", "min_concurrency": 10,
                          "max_concurrency": 2000, "drain_grace": 5.0, "deadline": 60.0,
                          "wait_expiration": 3600.0},
                         partitions=4, records=RECORDS, handle=counterparty, script=sample,
                         sweep_every_s=30.0))  # nothing expires; parsing the topic costs

    settled = [size for at, size in windows if at >= SETTLED_AFTER_S]
    assert windows[0][1] == 10, windows[:3]  # it starts at its minimum
    assert settled, windows
    assert min(settled) >= CAPACITY and max(settled) <= 2 * CAPACITY, windows
    assert counterparty.shed < 0.01 * counterparty.requests, (counterparty.shed,
                                                              counterparty.requests)
    assert committed_to_end(log)
    assert check(log) == []
