"""`--rate-limit` on the simulated Kafka: the rate holds over a minute, measured at the
counterparty, with a window that could go far faster (under the virtual clock the measure is
exact, where the real stack's was within 2 % on a quiet machine); the token is taken before a
record's call starts, that is before its offset becomes committable, so a record cut off while
it waits for one is left to the next owner."""

from __future__ import annotations

from cases import answer
from oracle import check
from simkafka import WriteFaults
from world import quiet, simulate

RATE_PER_S, SPAN_S = 50, 60.0


def test_the_rate_limit_holds_to_two_percent_over_a_minute() -> None:
    """Calls after the first second (the bucket starts full), over 60 s: 50/s ± 2 %."""
    log = simulate(quiet({"concurrency": 200, "rate_limit": f"{RATE_PER_S}/s"}, partitions=2,
                         records=int(RATE_PER_S * (SPAN_S + 8)),
                         handle=answer(lambda _v: 0.01),
                         sweep_every_s=30.0))  # nothing expires; parsing the topic costs
    starts = sorted(call.started for call in log.calls)
    start = starts[0] + 1.0
    measured = sum(1 for at in starts if start <= at < start + SPAN_S)
    assert abs(measured / (RATE_PER_S * SPAN_S) - 1) <= 0.02, f"{measured} calls in {SPAN_S} s"
    assert check(log) == []


def test_records_waiting_for_a_token_at_a_stop_are_left_to_the_next_owner() -> None:
    """`--rate-limit 1/s --concurrency 10 --drain-grace 1s`, stopped after 8 s: what was not
    called is not committed, and the sweep never expires it as if it had been tried."""
    log = simulate(quiet({"rate_limit": "1/s", "concurrency": 10, "drain_grace": 1.0},
                         records=20, events=[(8.0, "sigterm")]))
    first = log.pods[0]
    called = {c.offset for c in log.calls if c.pod == first.name}
    committed = max((c.offset for c in log.cluster.commits if c.member == first.name),
                    default=0)
    assert committed <= len(called)
    assert check(log) == []


def test_a_long_token_wait_never_lets_the_wait_record_expire() -> None:
    """At 2/s, 60 records in a window of 50 wait up to 30 s for a token, longer than the
    wait expiration leaves: the wait record is written again while they wait, so the sweep
    never expires a record the pod then calls."""
    log = simulate(quiet({"rate_limit": "2/s", "concurrency": 50, "wait_expiration": 12.0,
                          "deadline": 1.0}, records=60, sweep_every_s=0.5))
    assert not log.swept
    assert check(log) == []


def test_a_slot_wait_then_a_token_wait_never_outlast_the_wait_record() -> None:
    """A wait record is written again once half of what the expiration leaves beyond the
    deadline has passed since it was written, whatever the record waited for meanwhile. At
    10/min with one slot and writes of 1 s, a record prepared ahead waits up to 6 s for the
    slot, then up to 6 s for its token: each wait under the 6.5 s that triggers a rewrite, the
    two together with the write past the 13 s the expiration leaves. Measured from each wait's
    own start, the call began with less than its deadline left, and the sweep expired records
    their pod had called (a DLQ record for a call that succeeded)."""
    log = simulate(quiet({"rate_limit": "10/min", "concurrency": 1, "wait_expiration": 14.0,
                          "deadline": 1.0}, records=8, handle=answer(lambda _v: 0.05),
                         sweep_every_s=0.5, write_faults=WriteFaults(latency_s=(1.0, 1.0))))
    assert not log.swept, f"expired while their pod called them: {sorted(log.swept)}"
    assert check(log) == []


def test_the_rate_holds_across_the_window() -> None:
    """Calls start no faster than the limit (its burst aside), whatever the window."""
    log = simulate(quiet({"rate_limit": "5/s", "concurrency": 40}, records=50))
    starts = sorted(c.started for c in log.calls)
    span = starts[-1] - starts[0]
    assert len(starts) == 50
    assert span >= (50 - 1) / 5 - 0.01
    assert check(log) == []
