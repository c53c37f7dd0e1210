"""The Kafka client failing as real clusters make it fail: fetches, positions and committed
offsets that cannot be read, records it cannot parse, commits applied but reported failed."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import random
from collections.abc import Coroutine
from typing import Any, TypeVar

import looptime
import oracle
import pytest
import world
from cases import MID_READ_CALLS, answer, committed, fetch_failing_mid_read
from oracle import check
from simkafka import ClientFaults, SimCluster, SimConsumer, SimRecord, SimWriter, WriteFaults
from world import INPUT, Input, World, quiet, simulate

from dispatcher.errors import FatalError, KafkaClientError
from dispatcher.kafka.seam import TopicPartition
from dispatcher.wire import WITHDRAWN, WRITER_GENERATION, OutgoingRecord

T = TypeVar("T")


def test_a_record_the_client_cannot_parse_in_a_new_groups_first_fetch_skips_nothing() -> None:
    """A fresh group (no committed offset) whose first fetch fails on a record the client
    cannot parse: the fetch consumed the records before it. Every one of them is still called:
    the engine goes back to where the partition started, not past them (the defect: it
    committed them uncalled)."""
    inputs = [Input(f"k{i}".encode(), f"v{i}".encode(), unreadable=i == 3) for i in range(12)]
    log = simulate(quiet(inputs=inputs, records=len(inputs)))
    assert check(log) == []
    called = {c.offset for c in log.calls}
    assert called == set(range(12)) - {3}, sorted(called)


def test_fetches_that_fail_are_tried_again() -> None:
    """Fetches failing now and then (a leader moving) are tried again; the pod does not die
    of them, and nothing fetched before a failure on another partition is lost."""
    log = simulate(quiet(records=60, partitions=3, client_faults=ClientFaults(
        fetch_error_rate=0.3, position_error_rate=0.3, committed_error_rate=0.5)))
    assert [p.error for p in log.pods] == [None] * len(log.pods)
    assert check(log) == []


def test_commits_applied_but_reported_failed_keep_every_invariant() -> None:
    """Ambiguous commits (applied, then reported failed) and commits that time out, through
    rebalances: the engine tries them again and nothing is committed uncalled."""
    log = simulate(quiet(records=60, partitions=2, events=[(0.3, "join"), (1.0, "rebalance")],
                         client_faults=ClientFaults(ambiguous_commit_rate=0.5,
                                                    commit_timeout_rate=0.2)))
    assert any(not a.ok for a in log.cluster.commit_attempts)
    assert check(log) == []


def test_a_rebalance_while_reading_past_an_unreadable_record_mixes_no_ownerships() -> None:
    """The engine reads one record at a time to find a record the client cannot parse, and a
    rebalance comes while it waits for more records of another partition: the same pod gets
    the partitions back, the client's positions go back to the committed offsets, and the read
    goes on from there. The defect: the records read before the rebalance and those read after
    it were started together, offsets going back (`offset 0 tracked after 9`), and the pod died
    (found by `sweep.py --faults --seed 200`)."""
    inputs = [Input(b"k", b"p0-%d" % i, partition=0, unreadable=i == 2) for i in range(5)]
    inputs += [Input(b"k", b"p1-%d" % i, partition=1) for i in range(10)]

    async def slow_writes(_world: World, _pod: str, _topic: str, _record: object) -> None:
        await asyncio.sleep(0.5)  # nothing lands while the careful read waits for more

    async def rebalance_while_reading(world: World) -> None:
        await asyncio.sleep(0.3)  # the careful read waits up to 1 s for a record after p1's last
        assert world.log.lines[-1].endswith("reading partitions one record at a time to find it")
        await world.cluster.rebalance([INPUT])

    log = simulate(quiet({"concurrency": 16}, inputs=inputs, records=len(inputs), partitions=2,
                         before_write=slow_writes, script=rebalance_while_reading))
    assert [p.error for p in log.pods] == [None]
    assert check(log) == []
    assert {(c.partition, c.offset) for c in log.calls} >= {(1, i) for i in range(10)}


def test_a_fetch_failing_while_reading_past_an_unreadable_record_loses_nothing_read() -> None:
    """A fetch fails while the engine reads one record at a time to find a record the client
    cannot parse. The defect: the records read before the failure were consumed but never
    started, the next fetch went on after them, and the watermark committed them uncalled
    (found by `sweep.py --faults --seed 273`)."""
    log, consumer = fetch_failing_mid_read({})
    assert consumer.careful_reads >= 4, "the fetch did not fail during the careful read"
    assert check(log) == []
    assert {(c.partition, c.offset) for c in log.calls} == MID_READ_CALLS


@pytest.mark.parametrize("seed", [670, 1150])
def test_a_commit_the_killed_pod_asks_for_after_the_kill_never_lands(
        seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """kill -9 during a rebalance, while records prepared ahead wait for a rate token below a
    record already called (holes). The simulator runs the killed engine's cancelled stop,
    whose drain gives the holes their tokens (their offsets committable, their calls never
    reaching the counterparty) and then asks for its final commit. A dead process sends
    nothing: that commit must never land, or the holes are committed uncalled and expire into
    the DLQ. The defect was the simulator's: `lands_after_kill`, meant for a commit sent before
    the kill, also landed the commits asked for after it (`sweep.py --faults --seed 670`, and
    `--seed 1150` with `--workers 2`)."""
    monkeypatch.setattr(world, "ALL_FAULTS", True)
    log = simulate(seed)
    killed = {p.name: p.killed_at for p in log.pods if p.killed_at is not None}
    assert killed, "the seed no longer kills a pod"
    assert [c for c in log.cluster.commits
            if c.member in killed and c.at > (killed[c.member] or 0.0)] == []
    assert check(log) == []


def test_a_pod_killed_while_its_assignment_completes_leaves_the_run_ending(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """`sweep.py --faults --seed 11` (the batch baseline, kills during revokes) polled on for
    ever: a pod killed while its assignment callback read positions left the callback waiting
    inside the simulated group's rebalance, so the group never dealt the dead pod's partitions
    again. The simulator's defect (test_rebalance.py has it alone); here the seed ends, every
    record committed."""
    monkeypatch.setattr(world, "ALL_FAULTS", True)
    log = simulate(11)
    assert [p.name for p in log.pods if p.killed_at is not None], "the seed no longer kills"
    assert log.hung_at is None and log.finished
    assert check(log) == []


def test_a_zombie_answers_only_for_repeating_the_owners_after_its_fence(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """`sweep.py --faults --seed 185`: a pod fenced at the moment it took over a killed pod's
    partition called again what the dead pod had called (the dead pod's repeats, within its
    bound), and later, with its group again, repeated its own zombie calls. The oracle charged
    both to the zombie and found 30 repeats over its bound of 22: a zombie answers for
    repeating the calls of owners after its fence, not for the calls an earlier owner left it."""
    monkeypatch.setattr(world, "ALL_FAULTS", True)
    log = simulate(185)
    killed = [p for p in log.pods if p.killed_at is not None]
    fenced = [(p, at) for p in log.pods for at, _noticed in p.fences]
    assert killed and fenced, "the seed no longer kills a pod and fences another"
    pod, fenced_at = fenced[0]
    assert any(a.member == pod.name and abs(a.at - fenced_at) < 1e-6
               for a in log.cluster.assignments), "the fence no longer meets the takeover"
    assert check(log) == []


@pytest.mark.parametrize("seed", [613, 626, 1101])
def test_a_kill_after_a_clean_revoke_may_leave_the_calls_still_running_to_expire(
        seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """A record called keeps running to its tombstone after a clean revoke (DESIGN.md,
    "Rebalances"); a kill -9 before that tombstone lands leaves its row open for the sweep to
    expire into the DLQ: no loss, and no fault of the revoke. The oracle called it a violation
    ("every ownership ended cleanly") until `sweep.py --faults --seed 630`, `683` and `1101`
    reached it (as drawn before the stalling loop joined the draw: 630 has a spell now). Since
    a record's wait-record refresh counts across its slot and token waits, 683's timing no
    longer reaches it; 626 does (2 calls cut). Since the window admits records again only once
    half of those prepared ahead are called, 630's no longer does either; 755 does (3 cut).
    Since an ordered pod fetches first for the partitions holding the fewest records not yet
    called, 755's no longer does; 613 does (1 cut)."""
    monkeypatch.setattr(world, "ALL_FAULTS", True)
    log = simulate(dataclasses.replace(world.draw(seed), stalls=None))
    killed = {p.name: p.killed_at for p in log.pods if p.killed_at is not None}
    cut = [c for c in log.calls
           if c.wait_id in log.swept and c.pod in killed and c.started <= (killed[c.pod] or 0)]
    assert cut, "the seed no longer expires a call its pod's kill cut"
    assert check(log) == []


def _on_a_virtual_clock(scenario: Coroutine[Any, Any, T]) -> T:
    """`scenario` run to its end on an event loop of its own, on looptime's virtual clock."""
    loop = looptime.new_event_loop(noop_cycles=0)
    try:
        return loop.run_until_complete(scenario)
    finally:
        loop.close()


def test_a_write_the_killed_pod_starts_after_the_kill_never_lands() -> None:
    """`lands_after_kill` is for a write sent before the kill -9. A write the killed engine's
    cancelled stop starts afterwards is never sent (a dead process sends nothing), so it can
    never land, however it ends."""
    async def scenario() -> list[SimRecord]:
        cluster = SimCluster(random.Random(0), "g", rebalance_timeout_s=5.0)
        cluster.create_topic("g.wait", 1)
        writer = SimWriter(cluster, "a#1", WriteFaults(lands_after_kill=1.0), alive=lambda: False)
        write = asyncio.create_task(writer.write("g.wait", OutgoingRecord(b"k", b"v", ())))
        await asyncio.sleep(0.5)
        write.cancel()  # the cancelled stop's own end
        with contextlib.suppress(asyncio.CancelledError):
            await write
        await asyncio.sleep(5.0)
        return cluster.records("g.wait")

    assert _on_a_virtual_clock(scenario()) == []


@pytest.mark.parametrize(("lands", "fatal_at"), [(0.0, None), (1.0, None), (1.0, 1.0)])
def test_a_write_a_live_pod_cuts_off_lands_when_it_would_have_if_drawn(
        lands: float, fatal_at: float | None) -> None:
    """`lands_after_cut`: a write whose acknowledgement a live pod stops waiting for (a drain's
    end cancels it) was sent: aiokafka's producer still delivers it as it closes, so it lands
    when it would have, marked with the moment of the cut; without the fault it never lands
    and counts as cancelled, nor when the broker refuses every write of the pod by then
    (`fatal_at`: `sweep.py --seed 5101` once landed four such writes after the pod's fatal
    stop, more rows left open than its window holds)."""
    async def scenario() -> tuple[list[SimRecord], list[tuple[str, str, OutgoingRecord]]]:
        cluster = SimCluster(random.Random(0), "g", rebalance_timeout_s=5.0)
        cluster.create_topic("g.wait", 1)
        writer = SimWriter(cluster, "a#1", WriteFaults(latency_s=(2.0, 2.0),
                                                       lands_after_cut=lands, fatal_at=fatal_at),
                           alive=lambda: True)
        write = asyncio.create_task(writer.write("g.wait", OutgoingRecord(b"k", b"v", ())))
        await asyncio.sleep(0.5)
        write.cancel()  # the drain's end
        with contextlib.suppress(asyncio.CancelledError):
            await write
        await asyncio.sleep(5.0)
        return cluster.records("g.wait"), cluster.cancelled_writes

    landed, cancelled = _on_a_virtual_clock(scenario())
    if lands and fatal_at is None:
        assert [(r.value, r.written_at, r.cut_at) for r in landed] == [(b"v", 2.0, 0.5)]
        assert cancelled == []
    else:
        assert landed == []
        assert [record.value for _, _, record in cancelled] == [b"v"]


@pytest.mark.parametrize("fatal_at", [None, 1.0])
def test_a_record_sent_behind_the_cut_lands_unless_the_broker_refuses_the_pod(
        fatal_at: float | None) -> None:
    """`send_behind` (the withdrawal a drain sends behind a wait record it cut off) lands when
    it would have, nobody waiting for it; once the broker refuses every write of the pod
    (`fatal_at`) it never lands, and counts as a write that never landed, as a cut write
    refused so does: the oracle excuses the row it should have closed (`sweep.py --seed
    26114`, once the draw stopped pods in a spell: its withdrawals were refused, and the
    oracle wanted them)."""
    async def scenario() -> tuple[list[SimRecord], list[tuple[str, str, OutgoingRecord]]]:
        cluster = SimCluster(random.Random(0), "g", rebalance_timeout_s=5.0)
        cluster.create_topic("g.wait", 1)
        writer = SimWriter(cluster, "a#1", WriteFaults(latency_s=(2.0, 2.0), fatal_at=fatal_at),
                           alive=lambda: True)
        await writer.send_behind("g.wait", OutgoingRecord(b"k", None, ()))
        await asyncio.sleep(5.0)
        return cluster.records("g.wait"), cluster.cancelled_writes

    landed, cancelled = _on_a_virtual_clock(scenario())
    if fatal_at is None:
        assert [(r.key, r.written_at) for r in landed] == [(b"k", 2.0)]
        assert cancelled == []
    else:
        assert landed == []
        assert [record.key for _, _, record in cancelled] == [b"k"]


def test_a_prepare_landing_after_its_pods_kill_may_reopen_a_closed_row_to_expire(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """DESIGN.md's "what is left" of late prepares: a pod killed before the withdrawal of its
    late prepare leaves the row that prepare reopened to expire (a duplicate DLQ record, never
    a loss). `sweep.py --seed 1429`: the prepare, sent before the kill -9, landed after it and
    after the next owner's tombstone; the oracle called it a pod that never closed its row."""
    monkeypatch.setattr(world, "ALL_FAULTS", True)
    log = simulate(1429)
    killed = {p.name: p.killed_at for p in log.pods if p.killed_at is not None}
    late = [r for r in log.cluster.records(log.topics.wait_topic)
            if r.written_by in killed and r.value is not None
            and r.written_at > (killed[r.written_by] or 0.0)]
    assert late, "no prepare lands after its pod's kill any more"
    assert check(log) == []


def test_the_batch_baselines_batch_fetched_before_a_rebalance_is_that_ownerships(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The batch baseline does not commit a batch for a partition revoked since it was
    fetched (`batch.py`); a batch fetched just before a rebalance and called just after it is
    repeated by the next owner. `sweep.py --seed 1260`: the oracle charged that repeat to the
    new, cleanly ended ownership the call started in, not the one the batch was fetched in."""
    monkeypatch.setattr(world, "ALL_FAULTS", True)
    log = simulate(1260)
    assert log.settings.mode.value == "batch", "the seed no longer draws the batch baseline"
    assert any(oracle.fetched_in(log, c) < c.generation for c in log.calls), (
        "no batch is called in a later generation than it was fetched in any more")
    assert check(log) == []


def test_a_next_owners_prepare_its_fatal_stop_leaves_open_may_reopen_a_closed_row() -> None:
    """DESIGN.md, "Failing fast": a pod stopping on a write that can never succeed leaves the
    record it caught open in the wait registry, for the sweep. Here the record's first owner
    called it and closed it, but none of its commits landed (so the next owner fetches it
    again), and the next owner's prepare of it is that fatal write, landing before it fails:
    the sweep expires the row it reopened. `sweep.py --seed 31750` (the first owner a zombie
    whose commits failed after its fence): the oracle read the next owner's prepare as a late
    prepare of a revoke that gave up, because the record's last call was the first owner's."""
    async def closed_uncommitted_then_a_fatal_next_owner(world: World) -> None:
        world.log.pods[0].consumer.failing_commits = 1_000  # none of a#1's commits lands
        await asyncio.sleep(1.0)
        await world.sigterm("a")
        await asyncio.sleep(1.0)
        await world.start_pod("a")  # fetches the record again; its prepare is the fatal write
        await asyncio.sleep(2.0)

    log = simulate(quiet({"concurrency": 1, "deadline": 1.0, "wait_expiration": 5.0},
                         records=1, handle=answer(lambda _v: 0.1),
                         script=closed_uncommitted_then_a_fatal_next_owner,
                         write_faults=WriteFaults(fatal_at=1.5, lands_then_fails=True)))
    first, second = log.pods
    assert [c.pod for c in log.calls] == [first.name]
    assert committed(log) == 0
    assert isinstance(second.error, FatalError)
    assert len(log.swept) == 1  # the row the fatal prepare reopened
    assert [r.written_by for r in log.cluster.records(log.topics.wait_topic)
            if r.value is not None] == [first.name, second.name]
    assert check(log) == []


def test_a_stale_batchs_repeat_is_charged_to_the_ownership_it_was_fetched_in(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The batch baseline calls on a batch fetched before a rebalance (`batch.py`), maybe
    after the partition's next owner called the same records: that repeat is the stale batch's
    ownership's, which the rebalance did not wait for, not the next owner's. `sweep.py --seed
    30242` (a rate of 2/s kept the stale batch calling for seconds): the oracle charged it to the
    next owner's ownership, which then ended cleanly."""
    monkeypatch.setattr(world, "ALL_FAULTS", True)
    log = simulate(30242)
    assert log.settings.mode.value == "batch", "the seed no longer draws the batch baseline"
    first: dict[str, int] = {}  # each record's first call's ownership
    later_from_older = False
    for call in sorted(log.calls, key=lambda c: c.started):
        fetched = oracle.fetched_in(log, call)
        later_from_older |= fetched < first.setdefault(call.wait_id, fetched)
    assert later_from_older, "no stale batch calls a record after its next owner any more"
    assert check(log) == []


def test_a_batch_is_charged_to_an_ownership_of_its_partition(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The ownership a batch was fetched in holds the batch's partition: a batch fetched in the
    same instant as a rebalance that gave its partition to another member is the older
    ownership's, even though the member's newer assignment (of other partitions) came at
    that instant too. `sweep.py --seed 2722`: the oracle charged the next owner's repeat to
    the newer ownership, which never held the partition and ended cleanly."""
    monkeypatch.setattr(world, "ALL_FAULTS", True)
    log = simulate(2722)
    assert log.settings.mode.value == "batch", "the seed no longer draws the batch baseline"
    held = {(a.member, a.generation): {p.partition for p in a.partitions}
            for a in log.cluster.assignments}
    assert all(c.partition in held.get((c.pod, oracle.fetched_in(log, c)), {c.partition})
               for c in log.calls), "a call is charged to an ownership without its partition"
    assert check(log) == []


def test_a_wait_record_is_closed_by_the_tombstone_after_it_in_its_partition(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """One producer's writes to one partition land in the order they were sent, several in
    one instant once a leader move ends: a call's tombstone from an earlier ownership, held
    back by the move, lands with the next ownership's prepare of the same record, before it.
    What closes that prepare is the withdrawal written after it. `sweep.py --seed 4877`: the
    oracle, by time alone, took the earlier tombstone landing in the same instant for the
    prepare's closing, a plain tombstone after its revoke."""
    monkeypatch.setattr(world, "ALL_FAULTS", True)
    log = simulate(4877)
    wait = [r for r in log.cluster.records(log.topics.wait_topic) if r.written_by != "sweep"]
    same_instant = {(r.key, r.written_at) for r in wait if r.value is None} & {
        (r.key, r.written_at) for r in wait if r.value is not None}
    assert same_instant, "no tombstone lands in the same instant as a prepare of its record"
    assert check(log) == []


def test_a_wait_record_is_closed_by_its_own_ownerships_tombstone(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A record called in one ownership runs on to its tombstone after its revoke; with slow
    writes that tombstone may land after the same pod's prepare of the record fetched again
    in its next ownership (the first one's commit did not cover it). It closes the call it
    follows (its outcome is durable before it), not the later prepare, which its own
    ownership's withdrawal closes. `sweep.py --seed 6034`: the oracle took the earlier
    ownership's tombstone for the later prepare's, a plain tombstone after its revoke."""
    monkeypatch.setattr(world, "ALL_FAULTS", True)
    log = simulate(6034)
    wait = [(r, int(oracle._header(r, WRITER_GENERATION) or -1))
            for r in log.cluster.records(log.topics.wait_topic) if r.written_by != "sweep"]
    assert any(tombstone.value is None and prepare.value is not None
               and tombstone.key == prepare.key and prepare.partition == tombstone.partition
               and prepare.offset < tombstone.offset and later > earlier
               for tombstone, earlier in wait for prepare, later in wait), (
        "no earlier ownership's tombstone lands after a later one's prepare any more")
    assert check(log) == []


def test_a_withdrawal_the_drain_cuts_off_has_another_sent_behind_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """DESIGN.md, "Rebalances": a late prepare that lands after the next owner closed the
    record is removed by its withdrawal; a pod killed before that withdrawal leaves the row to
    expire (a duplicate DLQ record, never a loss). A drain whose grace ran out while the
    withdrawal was still in flight did the same (`sweep.py --seed 18383`: a zombie's prepare,
    then its withdrawal, both slow); the drain now sends a withdrawal behind the wait record
    of every record not yet called that it cuts off ("Stopping"), which closes the row."""
    monkeypatch.setattr(world, "ALL_FAULTS", True)
    log = simulate(18383)
    withdrawn_cut = {(name, bytes(getattr(record, "key", b"") or b"").decode())
                     for name, topic, record in log.cluster.cancelled_writes
                     if topic == log.topics.wait_topic
                     and dict(getattr(record, "headers", ())).get(WITHDRAWN)}
    assert withdrawn_cut, "no withdrawal is cut off by a drain any more"
    for name, wait_id in withdrawn_cut:
        assert any(r.written_by == name and (r.key or b"").decode() == wait_id
                   and r.cut_at is not None and dict(r.headers).get(WITHDRAWN)
                   for r in log.cluster.records(log.topics.wait_topic)), (
            f"no withdrawal of {wait_id} sent behind the one {name}'s drain cut off")
        assert wait_id not in log.swept
    assert check(log) == []


def test_a_zombies_repeats_count_from_an_unreadable_record_it_read_past(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A record the client cannot parse holds the commit at it until its reference DLQ record
    is acknowledged (here late); the records read past it are called meanwhile, more than a
    window's worth, and a zombie's next owner calls them again. The bound counts what was
    prepared since the pod read past that record; the client never fetches it, so the oracle
    counted from the last commit instead and found 22 repeats against a bound of 21
    (`sweep.py --seed 33149`)."""
    monkeypatch.setattr(world, "ALL_FAULTS", True)
    log = simulate(33149)
    last = {}
    for entry in log.cluster.commits:
        last[(entry.member, entry.partition.topic, entry.partition.partition)] = entry.offset
    assert any((topic, partition, offset) in log.cluster.unreadable
               for (_member, topic, partition), offset in last.items()), (
        "no commit stops at an unreadable record any more")
    assert check(log) == []


def test_a_commit_answered_after_the_group_moved_on_is_refused() -> None:
    """A commit carries the generation it was sent in, and the group coordinator refuses it
    once a rebalance has moved the group on (IllegalGeneration), even for a partition the
    member owns again. The simulator's: it applied such a commit after the member's new
    assignment had read the committed offset, so the batch baseline went on from the older
    offset and the committed offset went back (`sweep.py --seed 42944`)."""
    async def scenario() -> tuple[str, int | None]:
        cluster = SimCluster(random.Random(0), "g", rebalance_timeout_s=5.0)
        cluster.create_topic(INPUT, 1)
        consumer = SimConsumer(cluster, "a#1", 10)
        consumer.subscribe([INPUT])
        await cluster.rebalance([INPUT])  # a#1 owns the partition
        tp = TopicPartition(INPUT, 0)
        commit = asyncio.create_task(consumer.commit({tp: 5}))
        await asyncio.sleep(0)  # sent: on its way to the coordinator
        await cluster.rebalance([INPUT])  # a#1 owns it again, in the next generation
        try:
            await commit
        except KafkaClientError as exc:
            return str(exc), cluster.committed.get(tp)
        return "applied", cluster.committed.get(tp)

    loop = looptime.new_event_loop(noop_cycles=0)
    try:
        error, committed = loop.run_until_complete(scenario())
    finally:
        loop.close()
    assert error.startswith("IllegalGenerationError"), error
    assert committed is None


def test_a_zombies_repeats_are_bounded_by_what_it_left_when_its_ownership_ended(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """DESIGN's bound on repeats counts the records a pod called since it fetched the oldest
    one it left uncommitted, judged when its ownership ended. The oracle's: it judged a zombie
    (fenced, calling on until it learns it) by the committed offsets when it learnt it, by
    then the next owner's, past every record the zombie had fetched, and bounded its repeats
    by what it called since its own last commit instead (`sweep.py --seed 40926`: most of the
    zombie's commits failed before its fence, and the next owner called its 15 records
    again)."""
    monkeypatch.setattr(world, "ALL_FAULTS", True)
    log = simulate(40926)
    zombie = next(p for p in log.pods if p.fences)
    fenced_at, noticed_at = zombie.fences[0]
    assert noticed_at is not None
    assert any(c.member != zombie.name and fenced_at < c.at <= noticed_at
               for c in log.cluster.commits), "the next owner no longer commits before the "\
        "zombie learns of its fence"
    assert check(log) == []
def test_a_prepare_a_drain_cut_off_is_withdrawn_behind_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A prepare still in flight when its pod's drain ends is sent all the same and lands when
    it would have; landing after the next owner called and closed the record, it reopened the
    row, which expired: a duplicate DLQ record, reading as if the record was never finished
    (`sweep.py --seed 10119` and `11969`, once the draw landed writes a drain cut off). The
    stop now sends a withdrawal behind each such write (DESIGN.md, "Stopping"), in the same
    partition and without waiting for it, so the row it opens is closed again. Replayed as it
    was drawn when found: the draw's later stop that cuts slow writes off and kills the next
    owner (`_draw_stop_cut_then_kill`, a stream of its own) changes this seed's course."""
    monkeypatch.setattr(world, "ALL_FAULTS", True)
    monkeypatch.setattr(world, "_draw_stop_cut_then_kill", lambda *_drawn: None)
    log = simulate(11969)
    wait = log.cluster.records(log.topics.wait_topic)
    late = {(r.written_by, (r.key or b"").decode()): r.offset for r in wait
            if r.cut_at is not None and r.value is not None}
    assert late, "no prepare a drain cut off lands any more"
    for (writer, wait_id), offset in late.items():
        assert any(r.written_by == writer and (r.key or b"").decode() == wait_id
                   and r.offset > offset and dict(r.headers).get(WITHDRAWN) for r in wait), (
            f"no withdrawal of {wait_id} behind {writer}'s late prepare")
    assert not {wait_id for _writer, wait_id in late} & set(log.swept)
    assert check(log) == []


def test_the_run_ends_once_the_writes_still_on_their_way_land(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A stopped pod's producer delivers the writes its drain cut off; the run's end waits for
    them as the broker would append them. `sweep.py --seed 18090`: a stop's withdrawal, slow,
    cut off, was due after the last pod stopped, and the run ended first, its wait record
    judged never closed."""
    monkeypatch.setattr(world, "ALL_FAULTS", True)
    log = simulate(18090)
    stopped = max(p.stopped_at or 0.0 for p in log.pods)
    assert any(r.cut_at is not None and r.written_at > stopped and dict(r.headers).get(WITHDRAWN)
               for r in log.cluster.records(log.topics.wait_topic)), (
        "no withdrawal a drain cut off lands after the last pod stopped any more")
    assert check(log) == []
