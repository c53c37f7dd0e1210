"""Rebalances: what a revoke waits for, how long, and what it leaves to the next owner."""

from __future__ import annotations

from oracle import check, revokes_leave_half_the_timeout
from simkafka import WriteFaults
from world import quiet, simulate


def test_a_revoke_under_ordering_keeps_half_the_rebalance_timeout_free() -> None:
    """Under --ordering the revoke waits for holes and then for the calls in flight, both
    within half the rebalance timeout (not half each), so the member rejoins in time."""
    log = simulate(quiet({"ordering": "key", "deadline": 1.0, "rebalance_timeout": 2.5,
                          "concurrency": 8},
                         records=60, keys=3, partitions=2,
                         behaviour={"ok": 1.0, "slow": 2.0},
                         events=[(1.0, "join"), (2.5, "rebalance"), (4.0, "rebalance")]))
    assert log.cluster.revokes
    assert revokes_leave_half_the_timeout(log) == []
    assert check(log) == []


def test_a_partition_back_while_its_earlier_calls_still_run_starts_it_over() -> None:
    """Under --ordering key a revoke gives up on calls still running (a probe sent back to the
    line by the circuit breaker, a hanging handler), its commit fails, and the same pod gets
    the partition back: it fetches again records whose earlier admission is still in the gate.
    They queue behind the running call instead of the pod dying of "already admitted"."""
    log = simulate(quiet(
        {"concurrency": 2, "ordering": "key", "deadline": 1.0, "commit_interval": 0.2,
         "rebalance_timeout": 4.0, "drain_grace": 2.0, "wait_expiration": 14.0,
         "circuit_breaker": "on", "rate_limit": "50/s"},
        seed=25, partitions=1, records=64, keys=2, produce_over_s=15.0,
        behaviour={"ok": 10.0, "retryable": 3, "cancelled": 0.5, "huge": 0.5},
        events=[(9.5, "rebalance"), (14.1, "rebalance"), (16.5, "sigterm"),
                (19.1, "rebalance")], commit_failure_rate=0.4,
        write_faults=WriteFaults(latency_s=(0.0005, 0.2), slow_rate=0.05, slow_s=3.0)))
    assert [p.error for p in log.pods] == [None] * len(log.pods)
    assert check(log) == []


def test_a_probe_sent_back_to_the_line_is_not_called_after_its_partition_moved() -> None:
    """A circuit probe that timed out goes back to the call line once; if its partition is
    revoked meanwhile it is not called again (another pod owns its key now): it ends with its
    timeout, in the DLQ, and no two pods call one key at once."""
    log = simulate(quiet({"ordering": "key", "deadline": 1.0, "concurrency": 4,
                          "rebalance_timeout": 3.0,
                          "circuit_breaker": "failure-rate=50%,window=2s,min-calls=2,open=1s"},
                         records=30, keys=2, partitions=2, outage=(0.5, 8.0),
                         events=[(5.0, "join")]))
    assert check(log) == []
