"""Rebalances: what a revoke waits for, how long, and what it leaves to the next owner."""

from __future__ import annotations

from oracle import check, revokes_leave_half_the_timeout
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
