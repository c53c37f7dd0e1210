"""Stopping (SIGTERM): what the drain calls, what it leaves to the next owner, and how it
leaves the wait registry."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping

import pytest
import world
from cases import Outage, answer, by_value, delayed_prepares, open_calls
from oracle import check, ownership_end
from simkafka import SimConsumer
from world import Input, RunLog, Script, World, quiet, simulate, until

from dispatcher.kafka.seam import TopicPartition
from dispatcher.wire import OutgoingRecord


def test_records_prepared_ahead_at_a_stop_are_left_uncalled_and_their_waits_closed() -> None:
    """A stop does not start the calls of records prepared ahead above each partition's
    highest called one: they stay uncommitted for the next owner, and their wait records are
    closed, so that a next owner an hour late does not find them expired into the DLQ as if
    they had been tried."""
    expiration_s = 20.0

    log = simulate(quiet({"concurrency": 1, "deadline": 2.0, "wait_expiration": expiration_s,
                          "drain_grace": 30.0},
                         records=10, handle=answer(lambda _v: 0.4),
                         script=_stop_a_then_wait(1.0, expiration_s * 2), sweep_every_s=1.0))
    first = log.pods[0]
    stopped_at = first.stopped_at or 0.0
    assert all(c.started < 1.0 for c in log.calls if c.pod == first.name)
    assert not log.swept
    assert check(log) == []
    assert stopped_at < 5.0


class _CommitsHangOnceStopping(SimConsumer):
    """Commits that hang for a second once `hang` is set (a group coordinator away)."""

    hang = False

    async def commit(self, offsets: Mapping[TopicPartition, int]) -> None:
        if self.hang:
            await asyncio.sleep(1.0)
        await super().commit(offsets)


def test_no_call_starts_after_the_grace_while_the_stops_commit_hangs() -> None:
    """The grace ends with a hole (a record below the highest called one, its prepare late)
    still waiting for a call slot, and the drain's commit hangs. The defect: the records left
    over were cancelled only after that commit, so a slot freed meanwhile started the hole's
    call after the grace, a call the commit could not cover and the stop then cut off
    (found by `sweep.py --faults --seed 971` before the pod kinds were drawn)."""
    async def late_first_prepare(_world: World, _pod: str, topic: str,
                                 record: OutgoingRecord) -> None:
        if topic.endswith(".wait") and record.value == b"v0" and record.headers:
            await asyncio.sleep(0.2)

    async def stop_with_a_hanging_commit(world: World) -> None:
        await asyncio.sleep(0.4)
        consumer = world.log.pods[0].consumer
        assert isinstance(consumer, _CommitsHangOnceStopping)
        consumer.hang = True
        await world.sigterm("a")

    log = simulate(quiet({"concurrency": 2, "deadline": 20.0, "drain_grace": 0.3},
                         inputs=[Input(b"k%d" % i, b"v%d" % i) for i in range(4)], records=4,
                         before_write=late_first_prepare, script=stop_with_a_hanging_commit,
                         make_consumer=_CommitsHangOnceStopping,
                         handle=answer(lambda v: {b"v1": 0.8, b"v2": 10.0}.get(v, 0.1))))
    first = log.pods[0]
    assert first.stop_asked_at is not None
    assert any(c.offset == 2 and c.started < first.stop_asked_at for c in log.calls), \
        "the hole's record above it was not called before the stop"
    grace_ends = first.stop_asked_at + 0.3
    assert [c.offset for c in log.calls if c.pod == first.name
            and c.started > grace_ends] == []
    assert check(log) == []


def test_a_stop_leaves_every_record_above_one_it_left() -> None:
    """Which records a stop leaves is fixed when it begins: those above each partition's
    highest called one. A record dead-lettered uncalled during the drain (a null value) once
    raised that mark, so a record below it, prepared after an earlier one had been left, was
    still called: the commit cannot pass the record left, and the next owner called the
    other again after a clean stop (an ordered lane's record before the one ahead of it, in
    `sweep.py --seed 20227`)."""
    holds = {b"v1": 0.6, b"v2": 1.0}  # each wait record acknowledged then: after the stop

    async def hold(world: World, _pod: str, topic: str, record: OutgoingRecord) -> None:
        until_s = 0.8 if topic.endswith(".dlq") else holds.get(record.value or b"", 0.0)
        if record.headers:  # not a tombstone
            await asyncio.sleep(max(0.0, until_s - world.now))

    async def stop(world: World) -> None:
        await asyncio.sleep(0.5)
        await world.sigterm("a")

    log = simulate(quiet({"concurrency": 4, "deadline": 20.0, "drain_grace": 30.0},
                         inputs=[Input(b"k0", b"v0"), Input(b"k1", b"v1"),
                                 Input(b"k2", b"v2"), Input(b"k3", None)],
                         before_write=hold, script=stop,
                         handle=answer(lambda v: 2.0 if v == b"v0" else 0.1)))
    assert check(log) == []
    first = log.pods[0]
    assert sorted(c.offset for c in log.calls if c.pod == first.name) == [0]


@pytest.mark.parametrize(("waits_for", "flags", "key_of"), [
    ("a call slot", {"concurrency": 1}, lambda i: b"k%d" % i),
    ("a rate token", {"concurrency": 3, "rate_limit": "1/min"}, lambda i: b"k%d" % i),
    ("its lane's call turn", {"concurrency": 3, "ordering": "key", "rebalance_timeout": 10.0},
     lambda _i: b"k"),
])
def test_a_stop_shorter_than_a_look_still_closes_the_waits_it_leaves(
        waits_for: str, flags: dict[str, object], key_of: Callable[[int], bytes]) -> None:
    """Records prepared ahead, waiting for a call slot, a rate token or their lane's call
    turn when the stop comes, hear of it at once, not at their wait's next look (every
    RECHECK_S): a grace shorter than that once cut them off with their wait records open, and
    each then expired into the DLQ although it was never called here, while the next owner
    called it too. Only the call the grace cut off expires (it was called)."""
    expiration_s = 20.0

    async def first_prepared_first(_world: World, _pod: str, topic: str,
                                   record: OutgoingRecord) -> None:
        if topic.endswith(".wait") and record.headers and record.value != b"v0":
            await asyncio.sleep(0.05)  # the first record is called first: none is a hole

    log = simulate(quiet({"deadline": 2.0, "wait_expiration": expiration_s,
                          "drain_grace": 0.2, **flags},
                         inputs=[Input(key_of(i), b"v%d" % i) for i in range(10)], records=10,
                         before_write=first_prepared_first, handle=answer(lambda _v: 1.5),
                         # stopped just after a look: the next comes after the grace
                         script=_stop_a_then_wait(1.2, expiration_s * 2), sweep_every_s=1.0))
    first = log.pods[0]
    called = {c.wait_id for c in log.calls if c.pod == first.name}
    assert [c.offset for c in log.calls if c.pod == first.name] == [0]
    prepared = {w.value for w in log.cluster.sent
                if w.pod == first.name and w.topic.endswith(".wait") and w.headers}
    assert b"v1" in prepared, f"no record waited prepared for {waits_for}"
    assert _swept_before(log, expiration_s * 2) == called
    # closed within the grace, not only once it is over (`_close_the_holes_left`)
    assert first.stop_asked_at is not None
    closed_at = [w.at for w in log.cluster.sent if w.pod == first.name
                 and w.topic.endswith(".wait") and w.value is None]
    assert closed_at and max(closed_at) < first.stop_asked_at + 0.2
    assert check(log) == []


def test_a_hole_the_grace_leaves_uncalled_closes_its_wait_record() -> None:
    """A hole (a record below one already called, so still called within the grace) that
    waits for a call slot until the grace runs out is not called: it stays uncommitted for the
    next owner. Its wait record is closed before the stop ends, as the records above the mark
    close theirs: once, cancelled with the record's task, it stayed open and expired into the
    DLQ although this pod never called it, while the next owner called it too. Only the calls
    the grace cut off expire (they were called)."""
    expiration_s = 20.0

    async def first_prepared_last(_world: World, _pod: str, topic: str,
                                  record: OutgoingRecord) -> None:
        if topic.endswith(".wait") and record.headers and record.value == b"v0":
            await asyncio.sleep(0.1)  # the records above it are called first: it is a hole

    log = simulate(quiet({"concurrency": 2, "deadline": 2.0, "wait_expiration": expiration_s,
                          "drain_grace": 0.2},
                         inputs=[Input(b"k%d" % i, b"v%d" % i) for i in range(4)], records=4,
                         before_write=first_prepared_last, handle=answer(lambda _v: 1.5),
                         script=_stop_a_then_wait(0.5, expiration_s * 2), sweep_every_s=1.0))
    first = log.pods[0]
    called = {c.wait_id for c in log.calls if c.pod == first.name}
    offsets = sorted(c.offset for c in log.calls if c.pod == first.name)
    assert len(offsets) == 2 and 0 not in offsets, f"not a hole at 0: {offsets}"
    prepared = {w.value for w in log.cluster.sent
                if w.pod == first.name and w.topic.endswith(".wait") and w.headers}
    assert b"v0" in prepared, "the hole was not prepared"
    assert _swept_before(log, expiration_s * 2) == called
    # closed by a write the stop waited for, not only by the withdrawal its drain sends behind
    # what it cuts off (which the producer may fail to deliver as it closes)
    hole = by_value(log)[b"v0"]
    assert first.stopped_at is not None
    assert any((r.key or b"").decode() == hole and r.value is None and r.cut_at is None
               and r.written_at < first.stopped_at
               for r in log.cluster.records(log.topics.wait_topic)), (
        "the hole's wait record was not closed before the stop ended")
    assert check(log) == []


def _swept_before(log: RunLog, at: float) -> set[str]:
    """The wait ids the sweep expired before `at` (`log.swept` keeps each one's last expiry)."""
    return {(r.key or b"").decode() for r in log.cluster.records(log.topics.wait_topic)
            if r.written_by == "sweep" and r.written_at < at}


def test_a_stop_that_cuts_a_revoke_off_ends_its_ownership_uncleanly() -> None:
    """A stop comes while a revoke waits for a hole (its prepare slow), and the drain's grace
    cuts both off before the revoke commits: the record called above the hole is called
    again by the next owner, the documented bound of an ownership that did not end cleanly.
    The oracle once judged the ownership by its revoke alone, whose wait had not run out, and
    called it clean (`sweep.py --seed 40981`, before this stop closed the holes it leaves)."""
    async def hole_join_then_stop(world: World) -> None:
        quick = by_value(world.log)[b"quick"]
        await until(lambda: any(c.wait_id == quick for c in world.log.calls)
                    and open_calls(world.log) == 3)
        joining = asyncio.ensure_future(world.start_pod("b"))  # a's revoke waits for the hole
        await asyncio.sleep(0.5)
        await world.sigterm("a")
        await joining

    log = simulate(quiet(
        {"deadline": 60.0, "rebalance_timeout": 150.0, "concurrency": 3, "drain_grace": 0.3},
        partitions=2, script=hole_join_then_stop,
        inputs=[Input(b"a", b"slow", partition=1), Input(b"b", b"quick", partition=1),
                *(Input(b"h%d" % i, b"hang-%d" % i, partition=0) for i in range(3))],
        handle=answer(lambda v: 12.0 if v.startswith(b"hang") else 0.1),
        before_write=delayed_prepares({b"slow": 3.0, b"hang": 0.5})))
    first = log.pods[0]
    revoke = next(r for r in log.cluster.revokes if r.member == first.name and r.started > 0)
    assert first.stop_asked_at is not None and revoke.ended is not None
    assert revoke.started < first.stop_asked_at < revoke.ended, "the stop came after the revoke"
    quick = by_value(log)[b"quick"]
    assert [c.pod for c in log.calls if c.wait_id == quick] == [first.name, log.pods[1].name]
    assert ownership_end(log, first, revoke.generation).unclean is not None
    assert check(log) == []



def test_no_call_starts_while_the_holes_left_close(monkeypatch: pytest.MonkeyPatch) -> None:
    """After the grace the holes left close their wait records before the stop cancels what
    still runs; meanwhile no call may start. `sweep.py --seed 9869`: a circuit probe whose
    call timed out went back to the line (a stop does not leave it: it was called), was handed
    a slot in that second, and was called again after the grace, a call the drain's commit
    could not cover. The call slots now close when the grace is over."""
    monkeypatch.setattr(world, "ALL_FAULTS", True)
    log = simulate(9869)
    first = log.pods[0]
    assert first.stop_asked_at is not None and first.stopped_at is not None
    assert first.stopped_at - first.stop_asked_at > log.settings.drain_grace, (
        "the drain did not run out its grace")
    returned = first.metrics.probes_returned.collect()[0].samples[0].value
    assert returned > 0, "no circuit probe went back to the line"
    assert check(log) == []


def test_a_stops_close_of_a_record_it_leaves_never_closes_the_next_owners_wait() -> None:
    """A stop closes the wait record of a record it leaves uncalled. If that close is slow,
    the drain cuts it off, but the producer had sent it: it lands later, after the next
    owner's prepare of the record. A plain tombstone then closed the next owner's row while
    its call ran; the next owner, killed mid-call with the record committed, left it with no
    outcome and no wait record to expire: lost. The close is a withdrawal now, which closes
    only a row of its own generation (DESIGN.md, "Stopping")."""
    landed_late: list[float] = []

    async def slow_close_of_v1(world: World, pod: str, topic: str,
                               record: OutgoingRecord) -> None:
        if (pod.startswith("a") and topic.endswith(".wait") and record.value is None
                and record.key == by_value(world.log)[b"v1"].encode()):
            # sent now; the broker appends it 3 s later, its acknowledgement after the cut
            asyncio.get_running_loop().call_later(3.0, lambda: (
                landed_late.append(world.now),
                world.cluster.append(topic, 0, record, written_by=pod)))
            await asyncio.sleep(10.0)

    async def stop_a_then_kill_b_mid_call(world: World) -> None:
        v1 = by_value(world.log)[b"v1"]
        await until(lambda: any(c.offset == 0 for c in world.log.calls))
        await asyncio.sleep(0.3)  # v1 waits prepared for the one call slot
        await world.sigterm("a")
        await world.start_pod("b")
        await until(lambda: bool(landed_late)
                    and any(c.wait_id == v1 and c.pod.startswith("b") for c in world.log.calls))
        await asyncio.sleep(1.0)  # b's commit passes v1
        await world.kill("b")

    log = simulate(quiet({"concurrency": 1, "deadline": 20.0, "drain_grace": 0.2,
                          "wait_expiration": 25.0, "commit_interval": 0.2},
                         inputs=[Input(b"k0", b"v0"), Input(b"k1", b"v1")], records=2,
                         before_write=slow_close_of_v1, script=stop_a_then_kill_b_mid_call,
                         handle=answer(lambda v: 1.5 if v == b"v0" else 30.0)))
    v1 = by_value(log)[b"v1"]
    first, second = log.pods[0], log.pods[1]
    assert [c.pod for c in log.calls if c.wait_id == v1] == [second.name]
    prepared_by_b = [w.at for w in log.cluster.sent if w.pod == second.name
                     and w.topic.endswith(".wait") and w.key == v1.encode() and w.headers]
    assert prepared_by_b and landed_late and prepared_by_b[0] < landed_late[0], (
        "the first pod's close did not land after the next owner's prepare")
    assert first.stopped_at is not None and first.stopped_at < landed_late[0]
    assert v1 in log.swept, "the next owner's wait record was closed while its call ran"
    assert check(log) == []


def _stop_a_then_wait(stop_at_s: float, away_s: float) -> Script:
    """A script: pod a stopped at `stop_at_s`, and no pod for `away_s` after it (longer than
    an expiration: what a stop leaves open, the sweep then expires)."""
    async def script(world: World) -> None:
        await asyncio.sleep(stop_at_s)
        await world.sigterm("a")
        await asyncio.sleep(away_s)

    return script


def test_no_hole_is_called_once_the_grace_is_over_on_a_stalled_loop(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A hole is called within the grace only. The grace was kept by the drain's timer alone:
    on a stalled loop that timer fires late, and a hole handed its call slot in the same late
    turn of the loop started its call after the grace had run out, to be cancelled at once by
    the drain (`sweep.py --seed 84533`: a stop at 7.70 s with a grace of 2 s, a loop held
    0.2 s every 0.5 s from 8.97 s, a hole's call started at 9.87 s). Whether the grace is over
    is now read off the loop's clock when a record would start its call (DESIGN.md,
    "Stopping")."""
    monkeypatch.setattr(world, "ALL_FAULTS", True)
    log = simulate(84533)
    stopped = next(p for p in log.pods if p.stop_asked_at is not None and p.killed_at is None)
    assert stopped.stop_asked_at is not None
    grace_over = stopped.stop_asked_at + log.settings.drain_grace
    assert any(at <= grace_over <= at + stall for at, stall in log.stalled), (
        "the loop no longer stalls over the end of the grace")
    late = [c.offset for c in log.calls if c.pod == stopped.name and c.started > grace_over]
    assert late == []
    assert check(log) == []


@pytest.mark.parametrize(("waiting", "first_prepare_s", "stop_at_s", "grace_s", "stall"), [
    ("a hole", 0.5, 1.2, 0.55, (1.65, 0.2)),
    ("a circuit probe sent back to the line", 0.0, 2.8, 0.6, (3.2, 0.3)),
])
def test_nothing_waiting_for_a_slot_is_called_once_the_grace_is_over_on_a_stalled_loop(
        waiting: str, first_prepare_s: float, stop_at_s: float, grace_s: float,
        stall: tuple[float, float]) -> None:
    """The two records a stop still calls within its grace, a hole (below a record called)
    and a circuit probe whose call timed out (called: a stop does not leave it), wait for a
    call slot while the circuit is open. The circuit half-opens within the grace; the line's
    next look is due just before the grace ends; the loop is held over both. In that late turn
    the line's timer, due before the drain's, hands the waiting record a slot: its wait once
    looked at its partition's ownership and the stop's mark, not at the clock, so its call
    started after the grace, to be cut off at once (`sweep.py --seed 84533` found the hole;
    the probe's path had the same race). Whether the grace is over is read off the loop's
    clock now (DESIGN.md, "Stopping").

    The hole: @1 is called at 0.1 s, fails and opens the circuit (open 1.5 s), @0's prepare
    lands at 0.5 s; the stop at 1.2 s (grace 0.55 s); the look due at 1.7 s; the loop held
    1.65-1.85 s. The probe: @0 times out (0.1-1.1 s), @1, the half-open circuit's probe, times
    out (1.6-2.6 s) and goes back to the line; the stop at 2.8 s (grace 0.6 s); the circuit
    half-opens at 3.1 s, the look is due at 3.3 s; the loop held 3.2-3.5 s."""
    async def stop(world: World) -> None:
        await asyncio.sleep(stop_at_s)
        await world.sigterm("a")

    log = simulate(quiet({"concurrency": 2, "deadline": 1.0, "drain_grace": grace_s,
                          "circuit_breaker": "min-calls=1,open=1.5s,probes=1,window=10s"},
                         inputs=[Input(b"k0", b"v0"), Input(b"k1", b"v1")], records=2,
                         script=stop, handle=Outage(100.0),
                         stalls=(stall[0], 0.01, 1.0, stall[1]),  # one stall: (from, held)
                         before_write=delayed_prepares({b"v0": first_prepare_s})
                         if first_prepare_s else None))
    first = log.pods[0]
    assert first.stop_asked_at is not None
    before_the_stop = {c.offset: c for c in log.calls
                       if c.pod == first.name and c.started < first.stop_asked_at}
    if waiting == "a hole":
        assert sorted(before_the_stop) == [1], "@0 was no hole below a record called"
    else:
        probe = before_the_stop.get(1)
        assert probe is not None and probe.ended is not None, "no probe call before the stop"
        assert probe.ended < first.stop_asked_at, "the probe's call did not end before the stop"
        assert first.metrics.probes_returned.collect()[0].samples[0].value == 1, (
            "the probe did not go back to the line")
    grace_over = first.stop_asked_at + grace_s
    assert any(at <= grace_over <= at + held for at, held in log.stalled), (
        "the loop no longer stalls over the end of the grace")
    assert [c.offset for c in log.calls
            if c.pod == first.name and c.started > grace_over] == [], waiting
    assert check(log) == []
