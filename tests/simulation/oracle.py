"""The oracle: DESIGN.md's invariants, checked against everything a simulated run left behind
(the partition logs, the group's commits, the counterparty's calls, the sweep, the pods' ends).

Each check returns the violations it found, one line each, naming the record and what broke.
No check reads what the engine logged or asks the engine whether it kept a promise: every
verdict is drawn from what Kafka, the counterparty and the orchestrator saw (the seam's calls,
the topics, the commits, the calls, the kills, stops and revokes and how long each took).
"""

from __future__ import annotations

import bisect
import functools
import itertools
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from registry import open_rows
from simkafka import RevokeEntry, SimRecord
from world import GROUP, INPUT, Call, PodRun, RunLog

from dispatcher.errors import FatalError
from dispatcher.flow.ordering import OrderingMode
from dispatcher.kafka.seam import TopicPartition
from dispatcher.pod.settings import Mode
from dispatcher.wire import (
    ORIGINAL_OFFSET,
    ORIGINAL_PARTITION,
    ORIGINAL_TOPIC,
    WAIT_EXPIRATION_UUID,
    WITHDRAWN,
    WRITER_GENERATION,
    wait_id_for,
)


# DESIGN.md's bounds of the window, written out here rather than imported from the engine
# (`dispatcher.pod.window`): the mutants (`mutants.py`) change the engine's, never the oracle's.
def prepared_ahead(window: int) -> int:
    """Records admitted and prepared beyond a window of N calls: a fifth, at least 2, at most
    100."""
    return min(max(-(-window // 5), 2), 100)


def tombstones_behind(window: int) -> int:
    """Finished records writing their tombstone outside the window: a tenth, at least 1."""
    return max(1, window // 10)


def most_open(window: int) -> int:
    """The calls, the records prepared ahead and the tombstones behind a window of N."""
    return window + prepared_ahead(window) + tombstones_behind(window)


EPSILON_S = 1e-6
REVOKE_COMMIT_RETRY_S = 0.2  # DESIGN: a failed revoke commit is tried again while time lasts
FINAL_COMMIT_TRIES = 5  # DESIGN: the stop's final commit is tried a few times
# How long before a fetch the window's size it was sized by may have been read (the poll asks
# the window, then `getmany` waits up to its 100 ms timeout).
FETCH_LEAD_S = 0.2


def check(log: RunLog) -> list[str]:
    """Every invariant's violations in `log`; empty when the run kept them all."""
    checks: list[Callable[[RunLog], list[str]]] = [
        engine_ends, finished, commits_never_go_back, commit_only_what_is_prepared,
        committed_means_called, every_record_ends, prepares_get_tombstones,
        never_called_after_swept, outcomes_are_written, expiries_are_bounded,
        uncalled_waits_are_closed, revoked_records_are_not_prepared, repeats_are_bounded,
        key_order, window_bound,
        window_holds_its_bounds, rate_bound, drain_starts_no_new_call,
        revokes_leave_half_the_timeout, calls_end_by_their_deadline,
    ]
    if _batch(log):
        # The batch baseline (`dispatcher/pod/batch.py`) has no wait topic: it commits a batch
        # once every call of it has its outcome, and a stop finishes the batch in progress.
        # What it promises is checked; the window's prepared-ahead and tombstone bounds and
        # the drain's rule for holes are the at-least-once engine's.
        checks = [commit_only_what_is_done if c is commit_only_what_is_prepared else c
                  for c in checks
                  if c not in (window_holds_its_bounds, drain_starts_no_new_call)]
    return [violation for one in checks for violation in one(log)]


def _batch(log: RunLog) -> bool:
    return log.settings.mode is Mode.BATCH


def _header(record: SimRecord, name: str) -> str | None:
    for key, value in record.headers:
        if key == name and value is not None:
            return value.decode()
    return None


def _wait_id(record: SimRecord) -> str:
    return _wait_id_at(record.topic, record.partition, record.offset)


@functools.lru_cache(maxsize=1 << 16)
def _wait_id_at(topic: str, partition: int, offset: int) -> str:
    """The record's wait id (a uuid5: each check asks for the same ones many times)."""
    return str(wait_id_for(GROUP, topic, partition, offset))


def _wait_id_of_write(topic: str, record: SimRecord | object) -> str | None:
    """The wait id an outcome or wait-topic write belongs to."""
    key, headers = getattr(record, "key", None), dict(getattr(record, "headers", ()))
    if topic.endswith(".wait"):
        return None if key is None else bytes(key).decode()
    if WAIT_EXPIRATION_UUID in headers:
        return bytes(headers[WAIT_EXPIRATION_UUID]).decode()
    try:
        return _wait_id_at(headers[ORIGINAL_TOPIC].decode(), int(headers[ORIGINAL_PARTITION]),
                           int(headers[ORIGINAL_OFFSET]))
    except (KeyError, ValueError, AttributeError):
        return None


def _inputs(log: RunLog) -> list[SimRecord]:
    return log.cluster.records(INPUT)


def _dlq(log: RunLog) -> dict[str, list[SimRecord]]:
    by_id: dict[str, list[SimRecord]] = defaultdict(list)
    for record in log.cluster.records(log.topics.dlq_topic):
        wait_id = _header(record, WAIT_EXPIRATION_UUID)
        if wait_id is not None:
            by_id[wait_id].append(record)
    return by_id


def _calls(log: RunLog) -> dict[str, list[Call]]:
    by_id: dict[str, list[Call]] = defaultdict(list)
    for call in log.calls:
        by_id[call.wait_id].append(call)
    return by_id


def engine_ends(log: RunLog) -> list[str]:
    """The engine never dies of an exception other than a documented fatal one, and a fatal
    one only because of the write that can never succeed its own writer raised (the very
    exception, not another `FatalError` that happened to come after one was injected)."""
    out = []
    for pod in log.pods:
        if pod.error is None:
            continue
        if not isinstance(pod.error, FatalError):
            out.append(f"pod {pod.name} died of {pod.error!r}")
        elif not any(pod.error.__cause__ is injected for injected in pod.injected):
            out.append(f"pod {pod.name} stopped fatally, not of the write its writer failed "
                       f"for good: {pod.error!r} (cause {pod.error.__cause__!r})")
    return out


def finished(log: RunLog) -> list[str]:
    """Liveness: with a pod running long enough, every input record gets committed, and the
    run ends (a task waiting for ever holds it past its bound)."""
    if log.hung_at is not None:
        return [f"the run never ended: still going at {log.hung_at:.1f} s (virtual), its bound"]
    if log.finished or log.fatal_injected:
        return []
    committed = {str(tp): log.cluster.committed.get(tp) for tp in log.cluster.partitions(INPUT)}
    return [f"the run did not commit its input within its budget (committed {committed})"]


def commits_never_go_back(log: RunLog) -> list[str]:
    last: dict[TopicPartition, int] = {}
    out = []
    for entry in log.cluster.commits:
        before = last.get(entry.partition)
        if before is not None and entry.offset < before:
            out.append(f"{entry.member} committed {entry.partition} back from {before} to "
                       f"{entry.offset} at {entry.at:.3f}s")
        last[entry.partition] = entry.offset
    return out


def commit_only_what_is_prepared(log: RunLog) -> list[str]:
    """At each commit, every record below it has a durable wait record or DLQ record."""
    durable_at: dict[str, float] = {}
    for record in log.cluster.records(log.topics.wait_topic):
        if record.value is not None and record.key is not None:
            durable_at.setdefault(record.key.decode(), record.written_at)
    for wait_id, records in _dlq(log).items():
        for record in records:
            if record.written_by != "sweep":
                at = durable_at.get(wait_id)
                durable_at[wait_id] = record.written_at if at is None else min(
                    at, record.written_at)
    inputs = {(r.partition, r.offset): r for r in _inputs(log)}
    out = []
    checked: dict[TopicPartition, int] = {}
    for entry in log.cluster.commits:
        start = checked.get(entry.partition, 0)
        for offset in range(start, entry.offset):
            record = inputs[(entry.partition.partition, offset)]
            at = durable_at.get(_wait_id(record))
            if at is None or at > entry.at:
                out.append(f"{entry.member} committed {entry.partition} to {entry.offset} at "
                           f"{entry.at:.3f}s before offset {offset} was prepared")
                break
        checked[entry.partition] = max(start, entry.offset)
    return out


def commit_only_what_is_done(log: RunLog) -> list[str]:
    """The batch baseline: at each commit, every record below it (from the offset committed
    before) was called to an outcome, or dead-lettered by a pod, before the commit."""
    calls, dlq = _calls(log), _dlq(log)
    inputs = {(r.partition, r.offset): r for r in _inputs(log)}
    out = []
    checked: dict[TopicPartition, int] = {}
    for entry in log.cluster.commits:
        start = checked.get(entry.partition, 0)
        for offset in range(start, entry.offset):
            wid = _wait_id(inputs[(entry.partition.partition, offset)])
            called = any(c.outcome not in ("", "killed", "cut off") and c.ended is not None
                         and c.ended <= entry.at for c in calls.get(wid, []))
            dead_lettered = any(r.written_by != "sweep" and r.written_at <= entry.at
                                for r in dlq.get(wid, []))
            if not (called or dead_lettered):
                out.append(f"{entry.member} committed {entry.partition} to {entry.offset} at "
                           f"{entry.at:.3f}s before offset {offset} was called to an outcome")
                break
        checked[entry.partition] = max(start, entry.offset)
    return out


def _committed_inputs(log: RunLog) -> Iterator[tuple[SimRecord, str]]:
    """The input records below their partition's committed offset, with their wait ids."""
    for record in _inputs(log):
        if record.offset < log.cluster.committed.get(
                TopicPartition(record.topic, record.partition), 0):
            yield record, _wait_id(record)


def committed_means_called(log: RunLog) -> list[str]:
    """A record below the committed offset was called, or has the pod's own DLQ record."""
    calls, dlq = _calls(log), _dlq(log)
    out = []
    for record, wait_id in _committed_inputs(log):
        own_dlq = any(r.written_by != "sweep" for r in dlq.get(wait_id, []))
        if not calls.get(wait_id) and not own_dlq:
            swept = " (the sweep expired it into the DLQ)" if wait_id in log.swept else ""
            out.append(f"{record.topic}/{record.partition}@{record.offset} committed but never "
                       f"called{swept}")
    return out


def every_record_ends(log: RunLog) -> list[str]:
    """Every input record ends called to an outcome, in the DLQ, or uncommitted."""
    calls, dlq = _calls(log), _dlq(log)
    out = []
    for record, wait_id in _committed_inputs(log):  # the rest is owned by the next owner
        ended = any(c.outcome == "ok" for c in calls.get(wait_id, [])) or wait_id in dlq
        if not ended:
            made = [f"{c.pod}:{c.outcome or 'unfinished'}" for c in calls.get(wait_id, [])]
            out.append(f"{record.topic}/{record.partition}@{record.offset} has no outcome "
                       f"(calls: {made or 'none'})")
    return out


def prepares_get_tombstones(log: RunLog) -> list[str]:
    """A record called to an outcome by a pod that lived on (not killed, not stopped fatally,
    not cut off by its drain's grace: DESIGN.md, "Stopping") is closed by that pod (DLQ record
    or result, then tombstone), never left for the sweep to expire, nor reopened by a wait
    record of another pod that could close it (one killed before its withdrawal, whose drain's
    grace cut its withdrawal off, or stopped fatally, may leave it open; a prepare its drain
    cut off, landing later, has a withdrawal behind it: DESIGN.md, "Stopping")."""
    lived_on = {p.name for p in log.pods
                if p.killed_at is None and p.error is None and not _cut_off_by_grace(log, p)}
    cut_off = {(pod, _wait_id_of_write(topic, record))
               for pod, topic, record in log.cluster.cancelled_writes}
    writers = _swept_writers(log)
    out = []
    for wait_id, calls in _calls(log).items():
        if wait_id not in log.swept:
            continue
        call = calls[-1]  # the call whose wait record the sweep found open
        if (call.pod in lived_on and call.ended is not None and call.ended <= log.swept[wait_id]
                and call.outcome not in ("cancelled", "cut off")
                and (call.pod, wait_id) not in cut_off):
            writer = writers.get(wait_id)
            if writer not in (None, call.pod) and (
                    _stopped_fatally(log, writer)
                    or _killed_before_withdrawing(log, writer, wait_id)
                    # its withdrawal in flight when its drain's grace ran out (`sweep.py
                    # --seed 18383`: a zombie's late prepare, its withdrawal slow)
                    or (writer, wait_id) in cut_off):
                continue
            if writer not in (None, call.pod):
                out.append(f"wait {wait_id} ({call.topic}/{call.partition}@{call.offset}): "
                           f"{writer}'s wait record landed after {call.pod} closed it (a "
                           "prepare its revoke gave up on) and reopened it; the sweep expired "
                           "it")
            else:
                out.append(f"wait {wait_id} ({call.topic}/{call.partition}@{call.offset}): "
                           f"{call.pod}'s call ended ({call.outcome}) but the pod never closed "
                           "it; the sweep expired it")
    return out


def _stopped_fatally(log: RunLog, writer: str) -> bool:
    """DESIGN.md, "Failing fast": a pod stopping on a write that can never succeed leaves the
    records it caught open in the registry (the reconciliation job owns them), as
    `uncalled_waits_are_closed` allows. `sweep.py --seed 31750`: the next owner's prepare of a
    record its earlier owner (a zombie, its commits refused) had called and closed was that
    fatal write, landing before it failed; the row it reopened expired."""
    pod = next((p for p in log.pods if p.name == writer), None)
    return pod is not None and pod.error is not None


def _killed_before_withdrawing(log: RunLog, writer: str, wait_id: str) -> bool:
    """DESIGN.md ("Rebalances", what is left): a pod killed between its late prepare's
    landing and the withdrawal it writes once its writes are acknowledged leaves that row to
    expire (a duplicate DLQ record, never a loss); `sweep.py --seed 1429`: the prepare landed
    after its writer's kill -9, sent before it. The withdrawal waits for the pod's slowest
    write in flight, so the kill may come that long after the landing."""
    pod = next((p for p in log.pods if p.name == writer), None)
    if pod is None or pod.killed_at is None:
        return False
    landed = [r.written_at for r in log.cluster.records(log.topics.wait_topic)
              if r.written_by == writer and r.value is not None
              and (r.key or b"").decode() == wait_id]
    faults = pod.write_faults  # its writer's own (a stop's spell adds leader moves to it)
    slowest = (faults.latency_s[1] + faults.slow_s + faults.late_ack_s
               + max((seconds for _at, seconds, _p in faults.leader_moves), default=0.0))
    return bool(landed) and pod.killed_at <= max(landed) + slowest


def never_called_after_swept(log: RunLog) -> list[str]:
    """A call never starts after the sweep expired its wait record: the DLQ record would say
    the counterparty was not reached when it was. Only a wait record left open by a killed pod
    (DESIGN's crash bound), or by a pod whose drain grace cut its record's path off (DESIGN.md,
    "Stopping": it stays open in the registry), may expire before the next owner gets to its
    record again (`sweep.py --seed 473`: a stop cut a path off after its call, before its
    tombstone; the next owner, slowed by `--rate-limit 2/s`, called it after it expired)."""
    left_open = {p.name for p in log.pods
                 if p.killed_at is not None or _cut_off_by_grace(log, p)}
    writers = _swept_writers(log)
    out = []
    for wait_id, calls in _calls(log).items():
        swept_at = log.swept.get(wait_id)
        if swept_at is None or writers.get(wait_id) in left_open:
            continue
        for call in calls:
            if call.started > swept_at:
                out.append(f"wait {wait_id} ({call.topic}/{call.partition}@{call.offset}) "
                           f"called by {call.pod} at {call.started:.2f}s after the sweep "
                           f"expired {writers.get(wait_id)}'s wait record at {swept_at:.2f}s")
                break
    return out


def _swept_writers(log: RunLog) -> dict[str, str]:
    """For each swept wait id, the pod that wrote the wait record the sweep found open: the
    registry's row as the records written up to that sweep left it."""
    records = log.cluster.records(log.topics.wait_topic)
    writers: dict[str, str] = {}
    for at in sorted({r.written_at for r in records if r.written_by == "sweep"}):
        before = (r for r in records
                  if r.written_at < at or (r.written_at == at and r.written_by != "sweep"))
        rows = open_rows(before, dlq_topic=log.topics.dlq_topic, group=GROUP)
        for record in records:
            if record.written_by == "sweep" and record.written_at == at:
                row = rows.get(uuid.UUID((record.key or b"").decode()))
                if row is not None:
                    writers[str(row.change.wait_id)] = row.record.written_by
    return writers


@dataclass(frozen=True)
class Ending:
    """How one ownership (a pod and the group generation it called in) ended, as seen from
    outside: when, and why it may leave records it called to be called again (None: it
    ended cleanly, so it may leave none)."""

    at: float
    unclean: str | None
    until: float = 0.0  # when the revoke or the drain that ended it returned


def ownership_end(log: RunLog, pod: PodRun, generation: int) -> Ending:
    """The end of `pod`'s ownership in `generation`: its revoke, its kill or its stop,
    whichever came first. Unclean when the pod was killed (before that revoke or stop
    returned), kicked from its group or stopped
    fatally; when its revoke ran out its wait for holes (half the rebalance timeout, less a
    deadline under --ordering: DESIGN.md "Rebalances") or its last commit in it failed; when
    its drain ran out its grace or its last commit then failed. Judged by the clock and the
    commits the group saw, never by what the engine logged."""
    settings = log.settings
    revoke = next((r for r in log.cluster.revokes
                   if r.member == pod.name and r.generation == generation), None)
    began = min((a.at for a in log.cluster.assignments
                 if a.member == pod.name and a.generation == generation), default=0.0)
    fenced = next(((at, noticed) for at, noticed in pod.fences if at >= began), None)
    ends = [at for at in (None if revoke is None else revoke.started, pod.killed_at,
                          pod.stop_asked_at, pod.stopped_at, None if fenced is None else fenced[0])
            if at is not None]
    at = min(ends, default=log.end_s)
    # A kill before the revoke or the drain that ended the ownership returned cuts it short
    # too: its commit may never land (found by `sweep.py --faults --seed 357`, a kill -9
    # while a revoke waited).
    returned = at
    if revoke is not None and revoke.started <= at:
        returned = log.end_s if revoke.ended is None else revoke.ended
    elif pod.stop_asked_at is not None and pod.stop_asked_at <= at:
        returned = log.end_s if pod.stopped_at is None else pod.stopped_at
    if pod.killed_at is not None and pod.killed_at <= returned + EPSILON_S:
        return Ending(at, "killed" if pod.killed_at <= at + EPSILON_S else
                      "killed before its revoke or drain returned", pod.killed_at)
    if pod.name in log.cluster.kicked:
        return Ending(at, "kicked from its group")
    if fenced is not None and fenced[0] <= at + EPSILON_S:
        # a zombie: it calls on until it learns it was fenced, and revokes then
        noticed = _gone_at(log, pod) if fenced[1] is None else fenced[1]
        return Ending(at, "fenced from its group", noticed)
    if pod.error is not None:
        return Ending(at, "stopped by a fatal error")
    if _batch(log) and revoke is not None and revoke.started <= at:
        return Ending(at, "batch mode: a rebalance does not wait for the batch in flight")
    if revoke is not None and revoke.started <= at:
        return _revoke_end(log, pod, revoke, at)
    if pod.stop_asked_at is not None and pod.stop_asked_at <= at:
        stopped = log.end_s if pod.stopped_at is None else pod.stopped_at
        if stopped - pod.stop_asked_at >= settings.drain_grace - 0.01:
            return Ending(at, f"its drain took its whole grace ({stopped - at:.2f}s)", stopped)
        # the batch baseline commits the batch its stop finished once (`batch.py`); the
        # engine tries its final commit a few times (`sweep.py --faults --seed 966`: a batch
        # baseline's one last commit failed, and the oracle wanted five)
        tries = 1 if _batch(log) else FINAL_COMMIT_TRIES
        if _last_commit_failed(log, pod.name, pod.stop_asked_at, stopped, tries=tries):
            return Ending(at, f"its last {tries} commits failed", stopped)
    return Ending(at, None)


def _revoke_end(log: RunLog, pod: PodRun, revoke: RevokeEntry, at: float) -> Ending:
    """An ownership a revoke ended: unclean when the revoke ran out its wait for holes, its
    commits failed until its budget was spent, or a stop cut it off."""
    settings = log.settings
    ended = log.end_s if revoke.ended is None else revoke.ended
    holes_s = settings.window().revoke_wait_s
    if settings.ordering is not OrderingMode.UNORDERED:
        holes_s = max(0.0, holes_s - settings.deadline)
    if ended - revoke.started >= holes_s - 0.01:
        return Ending(at, f"its revoke took its whole wait ({ended - revoke.started:.2f}s)",
                      ended)
    # a failed revoke commit is tried again while the revoke's budget lasts
    if (_last_commit_failed(log, pod.name, revoke.started, ended, tries=1)
            and ended - revoke.started >= settings.window().revoke_wait_s
            - 2 * REVOKE_COMMIT_RETRY_S):
        return Ending(at, "its revoke's commits failed until its time was up", ended)
    # A stop that came while the revoke still waited, and whose drain its grace cut off,
    # ended the revoke before its commit (`sweep.py --seed 40981`).
    if (pod.stop_asked_at is not None and pod.stop_asked_at <= ended + EPSILON_S
            and _cut_off_by_grace(log, pod)):
        return Ending(at, "its revoke cut off by a stop whose drain took its whole grace",
                      _gone_at(log, pod))
    return Ending(at, None)


def _last_commit_failed(log: RunLog, member: str, since: float, until: float, *,
                        tries: int) -> bool:
    """Whether `member`'s last `tries` commits between `since` and `until` all failed."""
    attempts = [a for a in log.cluster.commit_attempts
                if a.member == member and since <= a.at <= until + EPSILON_S]
    return len(attempts) >= tries and not any(a.ok for a in attempts[-tries:])


def repeats_are_bounded(log: RunLog) -> list[str]:
    """A record is called again by a later ownership only when the ownership that called it
    ended uncleanly (see `ownership_end`), and then at most DESIGN's bound: the window (with
    the records prepared ahead and the tombstones behind it) plus the records that pod prepared
    since it fetched the oldest record it left uncommitted (its last commit, with none). One
    ownership calls a record at most twice (a circuit probe goes
    back to the line once)."""
    calls = _calls(log)
    pods = {p.name: p for p in log.pods}
    out = []
    repeated: dict[tuple[str, int], list[str]] = defaultdict(list)
    for wid, made in calls.items():
        owners: list[tuple[str, int]] = []
        counts: dict[tuple[str, int], int] = defaultdict(int)
        last: Call | None = None
        for call in sorted(made, key=lambda c: c.started):
            owner = (call.pod, fetched_in(log, call) if _batch(log) else call.generation)
            counts[owner] += 1
            if not owners or owners[-1] != owner:
                if owners:
                    # a zombie's call (its pod fenced and not knowing it) repeats its next
                    # owner's: the zombie's fencing is the cause (`sweep.py --faults --seed 84`),
                    # unless what it repeats was a zombie's call too: then that zombie's
                    # (`sweep.py --faults --seed 626`: a call still running when its pod was
                    # fenced later repeated an earlier zombie's call)
                    # and unless what it repeats ran before the zombie was fenced: then the
                    # zombie, still the owner, called again what an earlier owner left
                    # (`sweep.py --faults --seed 185`: a pod fenced as it took over a killed
                    # pod's partition repeated the dead pod's calls)
                    zombie = (_zombie_call(log, call) and last is not None
                              and not _zombie_call(log, last)
                              and _since_its_fence(log, call, last))
                    # the batch baseline's batch fetched before a rebalance, called on after
                    # the next owner called it: the stale batch's ownership repeats it
                    # (`sweep.py --seed 30242`)
                    stale = _batch(log) and owner[1] < owners[-1][1]
                    repeated[owner if zombie or stale else owners[-1]].append(wid)
                owners.append(owner)
            last = call
        out += [f"wait {wid} called {n} times by {pod} in generation {generation}"
                for (pod, generation), n in counts.items() if n > 2]
    for (name, generation), wids in sorted(repeated.items()):
        pod = pods[name]
        ending = ownership_end(log, pod, generation)
        if ending.unclean is None:
            out.append(f"{len(wids)} records {name} called in generation {generation} were "
                       f"called again after its ownership ended cleanly at {ending.at:.2f}s "
                       f"(e.g. waits {wids[:3]})")
            continue
        until = max(ending.at, ending.until)
        since = _oldest_left_fetched(log, name, until, ending.at)
        # the batch baseline calls what it fetches, with no wait record first
        bound = most_open(pod.window) + (_fetched_since if _batch(log) else _prepared_since)(
            log, name, since, until)
        if len(wids) > bound:
            out.append(f"{len(wids)} records {name} called in generation {generation} were "
                       f"called again after it ended ({ending.unclean}); bound {bound}")
    return out


def fetched_in(log: RunLog, call: Call) -> int:
    """The batch baseline's ownership of a call: the generation whose assignment its batch was
    fetched in. A batch fetched before a rebalance and called after it is not committed for
    its revoked partition (`batch.py`): the ownership it was fetched in, which a rebalance does
    not wait for, is the one it repeats (`sweep.py --seed 1260`: called just after the new
    assignment, it was charged to that clean ownership). The assignment holds the call's
    partition: one of other partitions made in the same instant as the fetch came after it
    (`sweep.py --seed 2722`)."""
    fetched = max((f.at for f in log.cluster.fetches
                   if f.member == call.pod and f.at <= call.started + EPSILON_S
                   and any((r.partition, r.offset) == (call.partition, call.offset)
                           for r in f.records)), default=None)
    if fetched is None:
        return call.generation
    return max((a.generation for a in log.cluster.assignments
                if a.member == call.pod and a.at <= fetched + EPSILON_S
                and any(p.partition == call.partition and p.topic == call.topic
                        for p in a.partitions)), default=call.generation)


def _oldest_left_fetched(log: RunLog, member: str, until: float, ended_at: float) -> float:
    """When `member` fetched the oldest record it left uncommitted at `until` (the record at a
    partition's committed offset then, counting the commits of other members only until its
    ownership ended at `ended_at`: a zombie learns of its fence after the next owner has
    committed past what it left, `sweep.py --seed 40926`): the records it called above it
    since may all be called again. Its last commit when it fetched none of them. A record the
    client cannot parse is never fetched, only read past (its reference DLQ record, slow to be
    acknowledged, holds the commit at it: `sweep.py --seed 33149`): for one at the committed
    offset, the first fetch of a record after it counts."""
    committed: dict[tuple[str, int], int] = {}
    for entry in log.cluster.commits:
        if entry.at <= until and (entry.member == member or entry.at <= ended_at):
            committed[(entry.partition.topic, entry.partition.partition)] = entry.offset

    def left(record: SimRecord) -> bool:
        at = committed.get((record.topic, record.partition), 0)
        return record.offset == at or (
            record.offset > at and (record.topic, record.partition, at) in log.cluster.unreadable)

    fetched = [f.at for f in log.cluster.fetches if f.member == member and f.at <= until
               and any(left(r) for r in f.records)]
    last_commit = max((c.at for c in log.cluster.commits if c.member == member and c.at <= until),
                      default=0.0)
    return min([*fetched, last_commit])


def _fetched_since(log: RunLog, member: str, since: float, until: float) -> int:
    return sum(len(f.records) for f in log.cluster.fetches
               if f.member == member and since < f.at <= until)


def _prepared_since(log: RunLog, member: str, since: float, until: float) -> int:
    return sum(1 for r in log.cluster.records(log.topics.wait_topic)
               if r.written_by == member and r.value is not None and since < r.written_at <= until)


def key_order(log: RunLog) -> list[str]:
    """Under --ordering key (partition), no two calls of one key (partition) overlap, across
    pods and rebalances; one pod calls a key's records in offset order; and across pods no
    record of a key is called before every earlier record of its key was called (or sent to
    the DLQ by a pod) at least once. A pod fenced from its group without knowing it (a zombie)
    calls on until it learns it, while the next owner calls the same keys: its calls running
    at or after its fencing are left out (no consumer can know it is fenced before its
    heartbeat says so: DESIGN.md, "Ordering")."""
    mode = log.settings.ordering
    if mode is OrderingMode.UNORDERED:
        return []
    lanes: dict[tuple[object, ...], list[Call]] = defaultdict(list)
    for call in log.calls:
        lane = (call.topic, call.partition) if mode is OrderingMode.PARTITION else (
            call.topic, call.partition, call.key)
        lanes[lane].append(call)
    out = []
    for lane, calls in lanes.items():
        calls.sort(key=lambda c: c.started)
        known = [c for c in calls if not _zombie_call(log, c)]
        for before, after in itertools.pairwise(known):
            ended = before.ended if before.ended is not None else log.end_s
            if after.started < ended - 1e-6:
                out.append(f"lane {lane}: {after.pod}'s call of @{after.offset} started at "
                           f"{after.started:.3f}s while {before.pod}'s call of "
                           f"@{before.offset} ran until {ended:.3f}s")
                break
        by_owner: dict[tuple[str, int], list[Call]] = defaultdict(list)
        for call in calls:
            by_owner[(call.pod, call.generation)].append(call)
        for (pod, generation), own in by_owner.items():
            offsets = [c.offset for c in own]
            if any(b < a for a, b in itertools.pairwise(offsets)):
                out.append(f"lane {lane}: {pod} called offsets out of order in generation "
                           f"{generation}: {offsets}")
    return out + _lanes_in_offset_order(log, mode)


def _zombie_call(log: RunLog, call: Call) -> bool:
    """A call its pod ran (or started) while the group had fenced it and it did not know."""
    return _fenced_at(log, call) is not None


def _fenced_at(log: RunLog, call: Call) -> float | None:
    """When the fence that makes `call` a zombie's call began; None for a call of its own."""
    fences = next((p.fences for p in log.pods if p.name == call.pod), [])
    ended = log.end_s if call.ended is None else call.ended
    return next((fenced_at for fenced_at, noticed in fences
                 if ended > fenced_at and (noticed is None or call.started <= noticed)), None)


def _since_its_fence(log: RunLog, zombie: Call, earlier: Call) -> bool:
    """Whether `earlier` started after the fence that makes `zombie` a zombie's call began:
    the call of a later owner, which the zombie repeats."""
    fenced_at = _fenced_at(log, zombie)
    return fenced_at is not None and earlier.started >= fenced_at


def _lanes_in_offset_order(log: RunLog, mode: OrderingMode) -> list[str]:
    """Across pods: a call of a record starts only after every earlier record of its lane was
    first called or dead-lettered by a pod (a record with a null value has no turn: left out)."""
    first_handled: dict[str, float] = {}
    for call in log.calls:
        first_handled[call.wait_id] = min(first_handled.get(call.wait_id, call.started),
                                          call.started)
    for wid, records in _dlq(log).items():
        for record in records:
            if record.written_by != "sweep":
                first_handled[wid] = min(first_handled.get(wid, record.written_at),
                                         record.written_at)
    lanes: dict[tuple[object, ...], list[SimRecord]] = defaultdict(list)
    for record in _inputs(log):
        if (record.value is None or (mode is OrderingMode.KEY and record.key is None)
                or (record.topic, record.partition, record.offset) in log.cluster.unreadable):
            continue  # no turn: a null value, no key, or a key the client could not read
        lane = (record.topic, record.partition) if mode is OrderingMode.PARTITION else (
            record.topic, record.partition, record.key)
        lanes[lane].append(record)
    calls = _calls(log)
    out = []
    for lane, records in lanes.items():
        before = 0.0  # when every earlier record of the lane had been handled once
        for record in records:  # offset order
            wid = _wait_id(record)
            early = [c for c in calls.get(wid, [])
                     if c.started < before - EPSILON_S and not _zombie_call(log, c)]
            if early:
                out.append(f"lane {lane}: @{record.offset} called by {early[0].pod} at "
                           f"{early[0].started:.3f}s before an earlier record of its lane was "
                           f"first called ({before:.3f}s)")
                break
            handled = first_handled.get(wid)
            if handled is None:
                break  # never handled (the run stopped fatally): nothing after it is judged
            before = max(before, handled)
    return out


def window_bound(log: RunLog) -> list[str]:
    """A pod never has more calls running than its window."""
    out = []
    for pod in log.pods:
        events = sorted([(c.started, 1) for c in log.calls if c.pod == pod.name]
                        + [((c.ended if c.ended is not None else log.end_s) - 1e-6, -1)
                           for c in log.calls if c.pod == pod.name],
                        key=lambda e: (e[0], e[1]))
        running = 0
        for at, step in events:
            running += step
            if running > pod.window:
                out.append(f"{pod.name} ran {running} calls at {at:.3f}s, window {pod.window}")
                break
    return out


def revokes_leave_half_the_timeout(log: RunLog) -> list[str]:
    """A revoke returns within half the rebalance timeout (and its commit), so the member
    rejoins in time and is never kicked from its group."""
    limit = log.settings.rebalance_timeout_s / 2 + 0.5
    out = []
    for revoke in log.cluster.revokes:
        ended = log.end_s if revoke.ended is None else revoke.ended
        # a stalled loop holds the revoke too, as it would hold the member's heartbeat
        allowed = limit + _stalled_within(log, revoke.started, ended)
        if ended - revoke.started > allowed:
            out.append(f"{revoke.member}'s revoke took {ended - revoke.started:.2f}s "
                       f"(at most {allowed:.2f}s)")
    out += [f"{member} was kicked from its group during a revoke" for member in
            log.cluster.kicked]
    return out


LATE_TIMER_S = 0.001  # a timer fires within the virtual clock's resolution (1 µs), and floats


def calls_end_by_their_deadline(log: RunLog) -> list[str]:
    """A call, its retries included, ends by its deadline (`--deadline`: DESIGN.md, "The
    lifecycle of one record", step 2), late by no more than the loop stalled meanwhile; a
    call ends earlier when it answers, fails, or its pod stops or dies."""
    deadline = log.settings.deadline
    out = []
    for call in log.calls:
        if call.ended is None or call.outcome in ("killed", "cut off"):
            continue  # its pod died, or its drain cut it: not the deadline's doing
        late = call.ended - (call.started + deadline)
        if late > LATE_TIMER_S + _stalled_within(log, call.started, call.ended):
            out.append(f"call of {call.wait_id} by {call.pod} ran {late:.3f}s past its "
                       f"{deadline}s deadline ({call.outcome})")
    return out


def _stalled_within(log: RunLog, since: float, until: float) -> float:
    """The seconds the event loop was held (the scenario's stalls) between `since` and
    `until`: time no engine could use."""
    return sum(seconds for at, seconds in log.stalled if since <= at <= until)


@dataclass
class _PodWrites:
    """What one pod wrote, by wait id, in the order it landed."""

    prepares: dict[str, list[SimRecord]]
    tombstones: dict[str, list[SimRecord]]
    outcomes: dict[str, list[SimRecord]]  # its result and DLQ records


_WRITES: list[tuple[RunLog, dict[str, _PodWrites]]] = []  # the last log's, kept for its checks


def _pod_writes(log: RunLog) -> dict[str, _PodWrites]:
    """Each pod's wait-topic and outcome writes by wait id (read once per log: three checks
    ask)."""
    if _WRITES and _WRITES[0][0] is log:
        return _WRITES[0][1]
    by_pod = _read_pod_writes(log)
    _WRITES[:] = [(log, by_pod)]
    return by_pod


def _read_pod_writes(log: RunLog) -> dict[str, _PodWrites]:
    by_pod: dict[str, _PodWrites] = {}
    # In landing order across the topics, not topic after topic: a record's outcomes are its
    # result and DLQ records together, and "the first outcome after a call" must be the first
    # to land (topic after topic, a later call's DLQ record came before an earlier call's
    # result: `sweep.py --faults --seed 418`).
    written = sorted((record for topic in (log.topics.wait_topic, log.topics.dlq_topic,
                                           f"{GROUP}.result")
                      for record in log.cluster.records(topic)), key=lambda r: r.written_at)
    for record in written:
        if record.written_by in ("", "sweep"):
            continue
        wid = _wait_id_of_write(record.topic, record)
        if wid is None:
            continue
        writes = by_pod.setdefault(record.written_by, _PodWrites(
            defaultdict(list), defaultdict(list), defaultdict(list)))
        if record.topic != log.topics.wait_topic:
            writes.outcomes[wid].append(record)
        elif record.value is None:
            writes.tombstones[wid].append(record)
        else:
            writes.prepares[wid].append(record)
    return by_pod


def _cut_off_by_grace(log: RunLog, pod: PodRun) -> bool:
    """A stop whose drain grace ran out: the paths still running were cancelled."""
    return (pod.stop_asked_at is not None
            and _gone_at(log, pod) - pod.stop_asked_at >= log.settings.drain_grace - 0.01)


def _gone_at(log: RunLog, pod: PodRun) -> float:
    """When the pod's record tasks stopped: killed, or its run returned."""
    return min(at for at in (pod.killed_at, pod.stopped_at, log.end_s) if at is not None)


def _first_after(records: list[SimRecord], at: float) -> float | None:
    return next((r.written_at for r in records if r.written_at >= at), None)


def outcomes_are_written(log: RunLog) -> list[str]:
    """A call's outcome is made durable by the pod that called it: a handler's value becomes a
    result record (or, too large, a DLQ record), a failure or a deadline a DLQ record, unless
    the pod died first (killed, stopped fatally, or cut off by its drain's grace) or its engine
    cancelled the call. A circuit probe sent back to the line is judged by its last call."""
    by_pod = _pod_writes(log)
    pods = {p.name: p for p in log.pods}
    out = []
    for wid, made in _calls(log).items():
        last: dict[tuple[str, int], Call] = {}
        for call in sorted(made, key=lambda c: c.started):
            last[(call.pod, call.generation)] = call
        for call in last.values():
            pod = pods[call.pod]
            if (call.outcome in ("", "cancelled", "cut off", "killed")
                    or (call.outcome == "ok" and not call.returned)):
                continue
            if (pod.killed_at is not None or pod.error is not None
                    or _cut_off_by_grace(log, pod)):
                continue
            writes = by_pod.get(call.pod)
            outcomes = [] if writes is None else writes.outcomes.get(wid, [])
            if _first_after(outcomes, call.started) is None:
                out.append(f"wait {wid}: {call.pod}'s call ended ({call.outcome}) at "
                           f"{call.ended}s but it wrote no result or DLQ record for it")
    return out


def expiries_are_bounded(log: RunLog) -> list[str]:
    """The sweep expires a wait record only when its writer could not close it: a row written
    by a pod that was alive, not kicked from its group and still owned the record's partition
    when the sweep found it expired is a violation, and so is an expiry of a row whose writer's
    every ownership ended cleanly. A pod leaves at most its window's worth (DESIGN.md)."""
    writers = _swept_writers(log)
    pods = {p.name: p for p in log.pods}
    rows: dict[str, list[str]] = defaultdict(list)
    out = []
    for wid, writer in writers.items():
        pod = pods.get(writer)
        if pod is None:
            continue
        swept_at = log.swept[wid]
        rows[writer].append(wid)
        gone = _gone_at(log, pod)
        kicked_at = log.cluster.kicked.get(writer)
        revoked = any(r.member == writer and r.started <= swept_at for r in log.cluster.revokes)
        if (swept_at < gone and (kicked_at is None or kicked_at > swept_at) and not revoked
                and pod.stop_asked_at is None):
            out.append(f"wait {wid}: the sweep expired {writer}'s wait record at "
                       f"{swept_at:.2f}s while {writer} ran, in its group, owning its partition")
    calls = _calls(log)
    for writer, wids in rows.items():
        pod = pods[writer]
        endings = {ownership_end(log, pod, a.generation).unclean
                   for a in log.cluster.assignments if a.member == writer}
        # A record called keeps running to its tombstone after a clean revoke (DESIGN.md,
        # "Rebalances"): a kill -9 before that tombstone leaves its row open, however cleanly
        # the ownership ended (`sweep.py --faults --seed 630` and `683`).
        uncut = [wid for wid in wids
                 if not (pod.killed_at is not None
                         and any(c.pod == writer and c.started <= pod.killed_at
                                 for c in calls.get(wid, [])))]
        if uncut and not any(endings):
            out.append(f"{len(uncut)} wait records of {writer} expired, but every ownership of "
                       f"it ended cleanly and no kill cut their calls (e.g. {uncut[:3]})")
        elif len(wids) > most_open(pod.window):
            out.append(f"{len(wids)} wait records of {writer} expired: more than its window "
                       f"holds ({most_open(pod.window)})")
    return out


def uncalled_waits_are_closed(log: RunLog) -> list[str]:
    """A wait record of a record its pod never called in that ownership (revoked, stopped, or
    its prepare landed after its revoke gave up on it) is closed by that pod with a tombstone
    written after it; once the pod's ownership was revoked, or its stop began, that tombstone
    is a withdrawal (it must not close the next owner's row: a stop's, cut off by its drain, may
    land after the next owner's prepare). Only a pod that was killed or stopped fatally may
    leave one open, and one whose drain its grace cut off only one it could not close in
    time: a record whose prepare landed after the grace ran out, or whose closing write the
    cut cancelled. A stop wakes every record it leaves (DESIGN.md, "Stopping"), so one
    prepared before closes its wait record at once, however short the grace."""
    out = []
    by_pod = _pod_writes(log)
    calls = _calls(log)
    for pod in log.pods:
        writes = by_pod.get(pod.name)
        if writes is None or pod.killed_at is not None or pod.error is not None:
            continue
        left = _left_by_a_cut_stop(log, pod)
        for wid, prepares in writes.prepares.items():
            last = prepares[-1]
            generation = _header(last, WRITER_GENERATION)
            # Called in that ownership (a circuit probe back in the line included): it runs
            # on to its tombstone like every record already called (DESIGN.md, "Rebalances").
            if any(c.pod == pod.name and (c.started >= last.written_at
                                          or str(c.generation) == generation)
                   for c in calls.get(wid, [])):
                continue
            if left is not None and not left(wid, last, generation):
                continue
            # its own ownership's tombstone: an earlier one's (a call of the record running on
            # to its tombstone after its revoke) may land after it (`sweep.py --seed 6034`)
            closing = next((t for t in writes.tombstones.get(wid, [])
                            if _after_in_its_log(t, last)
                            and _header(t, WRITER_GENERATION) == generation), None)
            if closing is None:
                out.append(f"wait {wid}: {pod.name} wrote its wait record at "
                           f"{last.written_at:.3f}s, never called it and never closed it")
                continue
            if _header(closing, WITHDRAWN) == "true":
                continue
            revoke = next((r for r in log.cluster.revokes if r.member == pod.name
                           and str(r.generation) == generation), None)
            if revoke is not None and revoke.started < closing.written_at:
                after = "its revoke"
            elif pod.stop_asked_at is not None and pod.stop_asked_at < closing.written_at:
                after = "its stop began (cut off, it may land late)"
            else:
                continue
            out.append(f"wait {wid}: {pod.name} closed the wait record it left to the next "
                       f"owner with a plain tombstone at {closing.written_at:.3f}s, after "
                       f"{after}: it could close the next owner's row")
    return out


def _after_in_its_log(record: SimRecord, earlier: SimRecord) -> bool:
    """`record` landed after `earlier`: by offset in one partition (several land in one
    instant once a leader move ends, `sweep.py --seed 4877`), else by time."""
    if record.partition == earlier.partition:
        return record.offset > earlier.offset
    return record.written_at >= earlier.written_at


def _left_by_a_cut_stop(log: RunLog, pod: PodRun,
                        ) -> Callable[[str, SimRecord, str | None], bool] | None:
    """For a pod whose drain its grace cut off, which of its uncalled wait records its stop
    must have closed (None: not such a pod, all must be): in an ownership no revoke ended, one
    whose prepare landed before the grace ran out and whose writes the cut did not cancel
    mid-way, and one whose prepare the drain cut off but which landed late. A stop wakes the
    records above its mark at once, and the holes below it once the grace is over: each closes
    its wait record then; the drain sends a withdrawal behind each wait record it cuts off of a
    record not yet called (DESIGN.md, "Stopping")."""
    stop_at = pod.stop_asked_at
    if (stop_at is None or pod.stopped_at is None
            or pod.stopped_at - stop_at < log.settings.drain_grace - 0.01):
        return None
    grace_ends = stop_at + log.settings.drain_grace
    cancelled = {_wait_id_of_write(topic, record)
                 for name, topic, record in log.cluster.cancelled_writes if name == pod.name}
    revoked = {str(r.generation) for r in log.cluster.revokes if r.member == pod.name}

    def must_close(wid: str, last: SimRecord, generation: str | None) -> bool:
        if generation in revoked:
            return False
        if wid in cancelled:  # a write of it never landed (cut off, or refused by the broker)
            return False
        # one cut off that landed late has a withdrawal sent behind it
        return last.cut_at is not None or last.written_at < grace_ends

    return must_close


def revoked_records_are_not_prepared(log: RunLog) -> list[str]:
    """Once a pod's revoke began, it writes a wait record of that ownership only for a record
    it then calls there: a hole below its partition's highest called record (DESIGN.md,
    "Rebalances"). A record above it is abandoned before its prepare, and a circuit probe goes
    back to the call line (its wait record written again) only while its partition is still
    ours. Judged by the order the writes were sent in, against the moment the revoke began
    (one virtual instant holds both). And the revoke waits for the prepares in flight of the
    records it abandons: no first wait record of that ownership lands after the revoke
    returned (a refresh of one already durable may: its withdrawal follows it). A revoke that
    ran out its wait, or an ownership cut short (killed, kicked, fenced, stopped fatally or
    asked to stop), may leave a hole it prepared uncalled, or a prepare landing late."""
    if _batch(log):
        return []
    calls = _calls(log)
    pods = {p.name: p for p in log.pods}
    first_landed: dict[tuple[str, str, str], SimRecord] = {}  # (pod, generation, wait id)
    for record in log.cluster.records(log.topics.wait_topic):
        if record.value is not None and record.key is not None:
            first_landed.setdefault((record.written_by, _header(record, WRITER_GENERATION) or "",
                                     record.key.decode()), record)
    out = []
    for revoke in log.cluster.revokes:
        pod = pods.get(revoke.member)
        if revoke.began < 0 or pod is None:
            continue
        generation = str(revoke.generation)
        ended = log.end_s if revoke.ended is None else revoke.ended
        if (ownership_end(log, pod, revoke.generation).unclean is not None
                or (pod.stop_asked_at is not None and pod.stop_asked_at <= ended)):
            continue
        late = [s for s in log.cluster.sent
                if s.pod == pod.name and s.step > revoke.began and s.value is not None
                and s.topic == log.topics.wait_topic and s.key is not None
                and dict(s.headers).get(WRITER_GENERATION) == generation.encode()]
        for sent in late:
            wid = sent.key.decode() if sent.key is not None else ""
            if not any(c.pod == pod.name and c.generation == revoke.generation
                       and c.started >= sent.at for c in calls.get(wid, [])):
                out.append(f"wait {wid}: {pod.name} wrote its wait record at {sent.at:.3f}s, "
                           f"after its revoke (generation {generation}) began at "
                           f"{revoke.started:.3f}s, and never called it")
                break
        for (writer, written_in, wid), record in first_landed.items():
            if (writer == pod.name and written_in == generation
                    and record.written_at > ended + EPSILON_S):
                out.append(f"wait {wid}: {pod.name}'s wait record of generation {generation} "
                           f"landed at {record.written_at:.3f}s, after its revoke returned at "
                           f"{ended:.3f}s (a prepare in flight it did not wait for)")
                break
    return out


def window_holds_its_bounds(log: RunLog) -> list[str]:
    """What a pod holds stays within DESIGN's bounds for the window it was admitted under
    (under --concurrency auto, the size at that moment): the records called and not yet
    settled plus those prepared and waiting to be called stay within N + prepared_ahead(N);
    with the records whose outcome is durable and whose tombstone is not, within
    N + prepared_ahead(N) + tombstones_behind(N). N is the window at the pod's last admission
    (fetch) before the moment (a window that shrank keeps what it admitted). Records fetched
    by the poll that keeps a full window in its group are left out (DESIGN: a rebalance may add
    one poll's worth)."""
    out = []
    by_pod = _pod_writes(log)
    calls = _calls(log)
    for pod in log.pods:
        writes = by_pod.get(pod.name)
        if writes is None:
            continue
        fetched_at = [f.at for f in log.cluster.fetches
                      if f.member == pod.name and not f.others_paused]
        extra = {_wait_id(r) for f in log.cluster.fetches
                 if f.member == pod.name and f.others_paused for r in f.records}
        held, behind = _held_intervals(log, pod, writes, calls, extra)
        for at, count, with_behind in _peaks(held, behind):
            index = bisect.bisect_right(fetched_at, at + EPSILON_S) - 1
            if index < 0:
                continue
            since = fetched_at[index] - FETCH_LEAD_S
            # the window the pod told of, but never above --max-concurrency (`pod.window`):
            # the adaptive window stays within it, whatever size the engine says it took
            window = min(pod.window, max([pod.window_at(since), *(
                size for when, size in pod.windows if since <= when <= at)]))
            if count > window + prepared_ahead(window):
                out.append(f"{pod.name} held {count} records called or prepared ahead at "
                           f"{at:.3f}s: window {window}, prepared ahead at most "
                           f"{prepared_ahead(window)}")
                break
            if with_behind > most_open(window):
                out.append(f"{pod.name} held {with_behind} records at {at:.3f}s with the "
                           f"tombstones behind its window: at most {most_open(window)} "
                           f"(window {window}, tombstones behind {tombstones_behind(window)})")
                break
    return out


Interval = tuple[float, float]


def _held_intervals(log: RunLog, pod: PodRun, writes: _PodWrites, calls: dict[str, list[Call]],
                    extra: set[str]) -> tuple[list[Interval], list[Interval]]:
    """The pod's records in its window over time: (prepared and waiting to be called, or
    called and their outcome not yet durable), and (outcome durable, tombstone not yet)."""
    gone = _gone_at(log, pod)
    held: list[Interval] = []
    behind: list[Interval] = []
    for wid in set(writes.prepares) | {c.wait_id for c in log.calls if c.pod == pod.name}:
        if wid in extra:
            continue
        own = sorted(c.started for c in calls.get(wid, []) if c.pod == pod.name)
        tombs = writes.tombstones.get(wid, [])
        outcomes = writes.outcomes.get(wid, [])
        prepares = writes.prepares.get(wid, [])
        waiting_until = -1.0
        for prepare in prepares:  # waiting for its call (rewrites continue the same wait)
            if prepare.written_at < waiting_until or prepare.cut_at is not None:
                continue  # (cut off by its pod: no task waits for it once it lands)
            ends = [t for t in (bisect_first(own, prepare.written_at),
                                _first_after(tombs, prepare.written_at), gone) if t is not None]
            waiting_until = min(ends)
            held.append((prepare.written_at, waiting_until))
        for started in own:  # called, until its outcome is durable (or it goes back in line)
            settled = min(t for t in (_first_after(outcomes, started),
                                      _first_after(tombs, started),
                                      _first_after(prepares, started + EPSILON_S), gone)
                          if t is not None)
            held.append((started, settled))
            landed = _first_after(outcomes, started)
            if landed is not None and landed == settled:
                closed = _first_after(tombs, landed)
                behind.append((landed, gone if closed is None else min(closed, gone)))
    return held, behind


def bisect_first(times: list[float], at: float) -> float | None:
    """The first of sorted `times` at or after `at`."""
    index = bisect.bisect_left(times, at)
    return times[index] if index < len(times) else None


def _peaks(held: list[Interval], behind: list[Interval]) -> Iterator[tuple[float, int, int]]:
    """At each moment one of the intervals starts: (moment, how many `held` cover it, how many
    of both cover it); an interval covers [start, end)."""
    events = sorted([(a, 1, 1) for a, b in held if b > a] + [(b, -1, -1) for a, b in held if b > a]
                    + [(a, 0, 1) for a, b in behind if b > a]
                    + [(b, 0, -1) for a, b in behind if b > a],
                    key=lambda e: (e[0], e[2]))
    count = both = 0
    for at, step, step_both in events:
        count += step
        both += step_both
        if step_both > 0:
            yield at, count, both


def rate_bound(log: RunLog) -> list[str]:
    """Under --rate-limit, the calls a pod starts in any span of T seconds, summed over its
    workers (`--workers K`), are at most rate * T + burst (the token bucket's promise; a pod
    restarted starts with a full bucket); each of K workers bursts at least one call, so
    the burst is at least K (DESIGN.md, "Worker processes")."""
    limit = log.settings.rate()
    if limit is None:
        return []
    burst = max(limit.burst, log.settings.workers)
    out = []
    members: dict[str, set[str]] = defaultdict(set)
    for pod in log.pods:
        members[pod.supervisor or pod.name].add(pod.name)
    for supervisor, names in members.items():
        starts = sorted(c.started for c in log.calls if c.pod in names)
        for j, last in enumerate(starts):
            for i in range(j):
                if j - i + 1 > limit.per_s * (last - starts[i]) + burst + 1e-6:
                    out.append(f"{supervisor} started {j - i + 1} calls in "
                               f"{last - starts[i]:.3f}s: more than {limit} allows")
                    return out
    return out


def drain_starts_no_new_call(log: RunLog) -> list[str]:
    """Once a pod is asked to stop, it starts no call after its grace ends, and within it
    only calls of holes: records below the highest record of their partition it had called
    (or dead-lettered) in its current ownership. DESIGN.md ("Stopping") lets a hole be called
    within the grace so that the commit covers what was called above it; a record above is
    left to the next owner."""
    out = []
    own_dlq = [(r, wid) for wid, rs in _dlq(log).items() for r in rs]
    grace = log.settings.drain_grace
    for pod in log.pods:
        asked = pod.stop_asked_at
        if asked is None:
            continue
        assigned = max((a.at for a in log.cluster.assignments
                        if a.member == pod.name and a.at <= asked), default=0.0)
        mine = [c for c in log.calls if c.pod == pod.name and c.started >= assigned]
        for call in mine:
            # A call started in the very instant the stop was asked was on its way: the engine
            # learns of the stop in a callback of its own, after those already due (a stalled
            # loop makes such instants meet: `sweep.py --seed 1558`).
            if call.started <= asked + EPSILON_S:
                continue
            if call.started > asked + grace + EPSILON_S:
                out.append(f"{pod.name} started a call of @{call.offset} at "
                           f"{call.started:.3f}s, after its grace ended")
                break
            handled = [c.offset for c in mine if c.partition == call.partition
                       and c.started < call.started] + [
                int(_header(r, ORIGINAL_OFFSET) or -1) for r, _ in own_dlq
                if r.written_by == pod.name and assigned <= r.written_at <= call.started
                and _header(r, ORIGINAL_PARTITION) == str(call.partition)]
            if call.offset > max(handled, default=-1):
                out.append(f"{pod.name} started a call of {call.topic}/{call.partition}@"
                           f"{call.offset} at {call.started:.3f}s while draining (asked at "
                           f"{asked:.3f}s): above every record it had called there")
                break
    return out
