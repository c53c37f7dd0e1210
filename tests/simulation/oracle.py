"""The oracle: DESIGN.md's invariants, checked against everything a simulated run left behind
(the partition logs, the group's commits, the counterparty's calls, the sweep, the pods' ends).

Each check returns the violations it found, one line each, naming the record and what broke.
"""

from __future__ import annotations

import itertools
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator

from registry import open_rows
from simkafka import SimRecord
from world import GROUP, INPUT, Call, RunLog

from dispatcher.errors import FatalError
from dispatcher.flow.ordering import OrderingMode
from dispatcher.kafka.seam import TopicPartition
from dispatcher.pod.window import most_open
from dispatcher.wire import (
    ORIGINAL_OFFSET,
    ORIGINAL_PARTITION,
    ORIGINAL_TOPIC,
    WAIT_EXPIRATION_UUID,
    wait_id_for,
)

# How a pod that knew it could not keep a clean rebalance or a clean stop says so; after one of
# these, repeated calls are bounded (DESIGN.md) rather than zero.
NOT_CLEAN = ("revoke: after", "still in flight at shutdown", "revoke: the commit of",
             "the final commit failed", "calls of revoked partitions still running")


def check(log: RunLog) -> list[str]:
    """Every invariant's violations in `log`; empty when the run kept them all."""
    checks: list[Callable[[RunLog], list[str]]] = [
        engine_ends, finished, commits_never_go_back, commit_only_what_is_prepared,
        committed_means_called, every_record_ends, prepares_get_tombstones,
        never_called_after_swept,
        repeats_are_bounded, key_order, window_bound, revokes_leave_half_the_timeout,
    ]
    return [violation for one in checks for violation in one(log)]


def _header(record: SimRecord, name: str) -> str | None:
    for key, value in record.headers:
        if key == name and value is not None:
            return value.decode()
    return None


def _wait_id(record: SimRecord) -> str:
    return str(wait_id_for(GROUP, record.topic, record.partition, record.offset))


def _wait_id_of_write(topic: str, record: SimRecord | object) -> str | None:
    """The wait id an outcome or wait-topic write belongs to."""
    key, headers = getattr(record, "key", None), dict(getattr(record, "headers", ()))
    if topic.endswith(".wait"):
        return None if key is None else bytes(key).decode()
    if WAIT_EXPIRATION_UUID in headers:
        return bytes(headers[WAIT_EXPIRATION_UUID]).decode()
    try:
        return str(wait_id_for(GROUP, headers[ORIGINAL_TOPIC].decode(),
                               int(headers[ORIGINAL_PARTITION]), int(headers[ORIGINAL_OFFSET])))
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
    one only when a write that can never succeed was injected."""
    out = []
    for pod in log.pods:
        if pod.error is None:
            continue
        if not isinstance(pod.error, FatalError):
            out.append(f"pod {pod.name} died of {pod.error!r}")
        elif not log.fatal_injected:
            out.append(f"pod {pod.name} stopped fatally with no fatal fault: {pod.error!r}")
    return out


def finished(log: RunLog) -> list[str]:
    """Liveness: with a pod running long enough, every input record gets committed."""
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
    """A record called to an outcome by a pod that lived on is closed by that pod (DLQ record
    or result, then tombstone), never left for the sweep to expire."""
    lived_on = {p.name for p in log.pods if p.killed_at is None and p.error is None}
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


def never_called_after_swept(log: RunLog) -> list[str]:
    """A call never starts after the sweep expired its wait record: the DLQ record would say
    the counterparty was not reached when it was. Only a wait record left by a killed pod may
    expire before the next owner gets to its record again (DESIGN's crash bound)."""
    killed = {p.name for p in log.pods if p.killed_at is not None}
    writers = _swept_writers(log)
    out = []
    for wait_id, calls in _calls(log).items():
        swept_at = log.swept.get(wait_id)
        if swept_at is None or writers.get(wait_id) in killed:
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


def repeats_are_bounded(log: RunLog) -> list[str]:
    """Repeated calls: none in a run where every rebalance and stop was clean (a circuit probe
    sent back to the line once aside); after a kill, at most DESIGN's bound."""
    calls = _calls(log)
    sessions = {wid: {(c.pod, c.generation) for c in cs} for wid, cs in calls.items()}
    repeats = sum(len(s) - 1 for s in sessions.values())
    # one call session calls a record at most twice: a circuit probe goes back to the line once
    twice = [wid for wid, cs in calls.items() if len(cs) - len(sessions[wid]) > len(sessions[wid])]
    out = [f"wait {wid} called {len(calls[wid])} times in {len(sessions[wid])} ownerships"
           for wid in twice]
    unclean = [w for w in log.warnings if any(sign in w for sign in NOT_CLEAN)]
    kills = [p for p in log.pods if p.killed_at is not None]
    if not kills and not unclean and not log.fatal_injected and repeats:
        again = [wid for wid, s in sessions.items() if len(s) > 1][:5]
        out.append(f"{repeats} repeated calls in a clean run (e.g. waits {again})")
    elif kills and not unclean:
        bound = sum(most_open(p.window) + _prepared_since_commit(log, p.name, p.killed_at or 0)
                    for p in kills)
        if repeats > bound:
            out.append(f"{repeats} repeated calls after {len(kills)} kills (bound {bound})")
    return out


def _prepared_since_commit(log: RunLog, member: str, until: float) -> int:
    last = max((c.at for c in log.cluster.commits if c.member == member), default=0.0)
    return sum(1 for r in log.cluster.records(log.topics.wait_topic)
               if r.written_by == member and r.value is not None and last < r.written_at <= until)


def key_order(log: RunLog) -> list[str]:
    """Under --ordering key (partition), no two calls of one key (partition) overlap, across
    pods and rebalances, and one pod calls a key's records in offset order."""
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
        for before, after in itertools.pairwise(calls):
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
    out = [f"{r.member}'s revoke took {r.ended - r.started:.2f}s (at most {limit:.2f}s)"
           for r in log.cluster.revokes if r.ended - r.started > limit]
    out += [f"{member} was kicked from its group during a revoke" for member in
            log.cluster.kicked]
    return out
