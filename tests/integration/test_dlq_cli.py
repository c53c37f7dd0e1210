"""`waitline dlq` against a real Kafka, through typer's CliRunner (and once as a subprocess)."""

from __future__ import annotations

import asyncio
import gc
import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable

import pytest
from dispatch_helpers import create_topic
from dlq_helpers import (
    EXPIRED,
    TIMEOUT,
    Dlq,
    add_dlq_records,
    topic_exists,
)
from typer.testing import CliRunner

from dispatcher.dlq.cli import app
from dispatcher.dlq.plan import ReplayRequest
from dispatcher.dlq.replay import ReplayOutcome, execute_replay
from dispatcher.dlq.session import KafkaSession, QuietObserver
from dispatcher.errors import ProduceError
from dispatcher.kafka.config import KafkaConfig
from dispatcher.wire import SourceRecord

pytestmark = pytest.mark.integration


def test_list_shows_every_record_oldest_first(dlq: Dlq) -> None:
    result = dlq.run("list", "--group", dlq.group, "--wide")
    assert result.exit_code == 0, result.output
    for text in ("0/0", "0/1", "0/2", "1/0", "1/1", "TimeoutError", "HTTPStatusError",
                 "malformed", f"{dlq.refunds}/0/5", "0x00ff6b6579", "(null)", "(empty)",
                 "5 matching records (5 scanned)"):
        assert text in result.stdout, text
    assert result.stdout.index("0/0") < result.stdout.index("0/1")  # two days older


def test_list_json_filters_by_exception_and_original_topic(dlq: Dlq) -> None:
    rows = dlq.json_lines("list", "--dlq-topic", dlq.topic, "--exception", "TimeoutError",
                          "--original-topic", dlq.orders)
    assert [(r["dlq_partition"], r["dlq_offset"]) for r in rows] == [(0, 0), (0, 2)]
    assert rows[0]["key"] == "base64:AP9rZXk="
    assert (rows[0]["original_topic"], rows[0]["original_partition"],
            rows[0]["original_offset"]) == (dlq.orders, 2, 10)
    assert rows[0]["wait_id"] == dlq.wait_ids[0]
    assert rows[1]["value_size"] == 0
    assert all(row["replayed_to"] == [] for row in rows)


def test_list_since_and_limit(dlq: Dlq) -> None:
    recent = dlq.json_lines("list", "--group", dlq.group, "--since", "1d")
    assert len(recent) == 4
    assert (0, 0) not in [(r["dlq_partition"], r["dlq_offset"]) for r in recent]
    limited = dlq.json_lines("list", "--group", dlq.group, "--limit", "1")
    assert [(r["dlq_partition"], r["dlq_offset"]) for r in limited] == [(0, 0)]
    table = dlq.run("list", "--group", dlq.group, "--limit", "1")
    assert "showing the 1 oldest of 5 matching records (5 scanned)" in table.stdout


def test_stats_count_by_exception_and_topic(dlq: Dlq) -> None:
    totals = dlq.json("stats", "--group", dlq.group)
    assert totals["total"] == 5
    assert totals["malformed"] == 1
    assert totals["by_exception"] == {"TimeoutError": 3, "HTTPStatusError": 1}
    assert totals["by_original_topic"] == {dlq.orders: 3, dlq.refunds: 1}
    assert totals["oldest"] < totals["newest"]
    table = dlq.run("stats", "--group", dlq.group)
    assert table.exit_code == 0, table.output
    assert "by exception" in table.stdout
    assert "HTTPStatusError" in table.stdout


def test_show_decodes_the_record_in_full(dlq: Dlq) -> None:
    detail = dlq.json("show", "--dlq-topic", dlq.topic, "--partition", "0", "--offset", "0")
    assert detail["exception"] == "TimeoutError"
    assert detail["stacktrace"] == TIMEOUT.stacktrace
    assert detail["group"] == dlq.group
    original = detail["original"]
    assert original["key"] == {"base64": "AP9rZXk="}
    assert original["headers"] == [["trace", {"base64": "//4="}], ["trace", {"utf8": "second"}],
                                   ["Exception", {"utf8": "theirs"}]]
    assert original["value"] == {"utf8": '{"order": 1}'}
    assert ["DispatcherGroup", {"utf8": dlq.group}] in detail["dlq_headers"]

    shown = dlq.run("show", "--group", dlq.group, "--partition", "1", "--offset", "0")
    assert shown.exit_code == 0, shown.output
    for text in ("stack trace", 'File "engine.py", line 1', "refund body", "00000000",
                 "13 bytes", f"{dlq.refunds} partition 0 offset 5"):
        assert text in shown.stdout, text


def test_show_by_wait_id_and_a_malformed_record(dlq: Dlq) -> None:
    found = dlq.json_lines("show", "--group", dlq.group, "--wait-id", dlq.wait_ids[1])
    assert [(d["dlq_partition"], d["dlq_offset"]) for d in found] == [(0, 1)]
    assert found[0]["original"]["key"] is None
    junk = dlq.json("show", "--group", dlq.group, "--partition", "1", "--offset", "1")
    assert junk["malformed"] is True
    assert "ORIGINAL_HEADERS" in junk["problem"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["list"], "pass --group GROUP"),
        (["list", "--group", "{group}", "--since", "soon"], "invalid duration 'soon'"),
        (["list", "--dlq-topic", "no-such-topic"], "DLQ topic no-such-topic does not exist"),
        (["show", "--group", "{group}", "--partition", "0", "--offset", "99"],
         "holds offsets 0 to 2; there is no offset 99"),
        (["show", "--group", "{group}", "--partition", "7", "--offset", "0"],
         "has partitions 0 to 1, not 7"),
        (["show", "--group", "{group}", "--partition", "0"], "pass either --partition"),
        (["replay", "--group", "{group}", "--to-topic", "nowhere", "--yes"],
         "--to-topic nowhere: refused, not the records' original topic and not on "
         "WAITLINE_REPLAY_TOPICS"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(dlq: Dlq, args: list[str], message: str) -> None:
    result = dlq.run(*[arg.format(group=dlq.group) for arg in args])
    assert result.exit_code == 2, result.output
    assert message in result.stderr
    assert "Traceback" not in result.output
    assert len(result.stderr.strip().splitlines()) == 1


def test_replay_dry_run_writes_nothing(dlq: Dlq) -> None:
    planned = dlq.json("replay", "--group", dlq.group, "--dry-run")
    assert planned["dry_run"] is True
    assert planned["planned"] == 4
    assert planned["planned_by_target"] == {dlq.orders: 3, dlq.refunds: 1}
    assert planned["malformed"] == 1
    assert len(planned["preview"]) == 4
    table = dlq.run("replay", "--group", dlq.group, "--dry-run")
    assert "dry run: nothing was written" in table.stdout
    assert dlq.written(dlq.orders) == []
    assert dlq.written(dlq.refunds) == []
    assert not asyncio.run(topic_exists(dlq.bootstrap, f"{dlq.topic}.replayed"))


def test_replay_writes_the_exact_originals_once(dlq: Dlq) -> None:
    first = dlq.json("replay", "--group", dlq.group, "--yes")
    assert first["replayed_by_target"] == {dlq.orders: 3, dlq.refunds: 1}
    assert first["malformed"] == 1
    assert dlq.each_original_written_once()
    for topic in (dlq.orders, dlq.refunds):  # each carries the original call's key, once
        assert all(len(keys) == 1 and keys[0] for keys in dlq.replay_keys(topic))

    second = dlq.json("replay", "--group", dlq.group, "--yes")
    assert (second["replayed"], second["already_replayed"]) == (0, 4)
    assert len(dlq.written(dlq.orders)) == 3
    assert len(dlq.written(dlq.refunds)) == 1
    listed = dlq.json_lines("list", "--group", dlq.group, "--original-topic", dlq.refunds)
    assert listed[0]["replayed_to"] == [dlq.refunds]


def test_filtered_replay_leaves_the_rest_for_a_later_replay(dlq: Dlq) -> None:
    only_http = dlq.json("replay", "--group", dlq.group, "--exception", "HTTPStatusError",
                         "--yes")
    assert only_http["replayed_by_target"] == {dlq.orders: 1}
    assert dlq.written(dlq.orders) == [dlq.originals[dlq.orders][1]]

    rest = dlq.json("replay", "--group", dlq.group, "--yes")
    assert rest["replayed_by_target"] == {dlq.orders: 2, dlq.refunds: 1}
    assert rest["already_replayed"] == 1
    assert dlq.each_original_written_once()
    assert dlq.json("replay", "--group", dlq.group, "--yes")["replayed"] == 0


def test_replay_asks_first_and_no_means_nothing_written(dlq: Dlq) -> None:
    declined = dlq.run("replay", "--group", dlq.group, "--original-topic", dlq.refunds,
                       stdin="n\n")
    assert declined.exit_code == 1, declined.output
    assert f"Replay 1 records from {dlq.topic} to {dlq.refunds} (1)?" in declined.stderr
    assert "not replayed" in declined.stdout
    assert dlq.written(dlq.refunds) == []

    accepted = dlq.run("replay", "--group", dlq.group, "--original-topic", dlq.refunds,
                       stdin="y\n")
    assert accepted.exit_code == 0, accepted.output
    assert "replayed 1 records" in accepted.stdout
    assert dlq.written(dlq.refunds) == dlq.originals[dlq.refunds]


def test_replay_to_another_topic_and_again_deliberately(
    dlq: Dlq, unique_name: Callable[[str], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    staging = unique_name("staging")
    monkeypatch.setenv("WAITLINE_REPLAY_TOPICS", f"elsewhere, {staging}")

    asyncio.run(create_topic(dlq.bootstrap, staging, 1))
    to_staging = dlq.json("replay", "--group", dlq.group, "--original-topic", dlq.refunds,
                          "--to-topic", staging, "--yes")
    assert to_staging["replayed_by_target"] == {staging: 1}
    assert dlq.written(staging) == dlq.originals[dlq.refunds]
    # Replayed to staging only: the original topic still gets it, once.
    home = dlq.json("replay", "--group", dlq.group, "--original-topic", dlq.refunds, "--yes")
    assert home["replayed_by_target"] == {dlq.refunds: 1}
    again = dlq.json("replay", "--group", dlq.group, "--original-topic", dlq.refunds,
                     "--include-replayed", "--yes")
    assert again["replayed_by_target"] == {dlq.refunds: 1}
    assert dlq.written(dlq.refunds) == dlq.originals[dlq.refunds] * 2


def test_replay_to_a_topic_off_the_allowlist_is_refused_and_writes_nothing(
    dlq: Dlq, unique_name: Callable[[str], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A DLQ holds payment and personal data: `--to-topic` is an exfiltration path unless the
    topic is on WAITLINE_REPLAY_TOPICS. The topic exists and Kafka would take the records."""
    outside, staging = unique_name("outside"), unique_name("staging")
    for topic in (outside, staging):
        asyncio.run(create_topic(dlq.bootstrap, topic, 1))
    monkeypatch.setenv("WAITLINE_REPLAY_TOPICS", staging)
    refused = dlq.run("replay", "--group", dlq.group, "--to-topic", outside, "--yes")
    assert refused.exit_code == 2, refused.output
    assert refused.stderr.strip().splitlines() == [
        f"error: --to-topic {outside}: refused, not the records' original topic and not on "
        "WAITLINE_REPLAY_TOPICS (a DLQ holds what failed, often payment or personal data: a "
        "replay writes each record to its original topic, or to a topic the allowlist names)"]
    assert dlq.written(outside) == []
    assert not asyncio.run(topic_exists(dlq.bootstrap, f"{dlq.topic}.replayed"))

    listed_but_missing = dlq.run("replay", "--group", dlq.group, "--to-topic",
                                 unique_name("missing"), "--yes")
    assert listed_but_missing.exit_code == 2  # off the list: refused before Kafka is asked
    monkeypatch.setenv("WAITLINE_REPLAY_TOPICS", f"{staging},{dlq.group}.wait")
    never = dlq.run("replay", "--group", dlq.group, "--to-topic", staging, "--yes")
    assert never.exit_code == 2, never.output
    assert (f"WAITLINE_REPLAY_TOPICS names '{dlq.group}.wait', the wait topic: a replay never "
            "writes there") in never.stderr
    assert dlq.written(staging) == []


@pytest.mark.parametrize("claimed", ["{dlq}", "{dlq}.replayed", "{group}.wait",
                                     "__consumer_offsets"])
def test_a_record_claiming_a_forbidden_original_topic_refuses_the_replay(
    dlq: Dlq, claimed: str
) -> None:
    """Whoever can write to the DLQ can make a record name any original topic: the replay
    refuses the whole plan naming the topic (what a record claims is not a target), writes
    nothing, and a filter leaving that record out replays the rest."""
    topic = claimed.format(dlq=dlq.topic, group=dlq.group)
    created = topic not in (dlq.topic, "__consumer_offsets")
    if created:
        asyncio.run(create_topic(dlq.bootstrap, topic, 1))
    before = len(dlq.written_as_is(dlq.topic))
    forged = SourceRecord(topic, 0, 1, b"forged", b'{"cardNumber": "4111111111111111"}', (), 0)
    add_dlq_records(dlq, [(0, forged, TIMEOUT)])
    refused = dlq.run("replay", "--group", dlq.group, "--yes")
    assert refused.exit_code == 2, refused.output
    (line,) = refused.stderr.strip().splitlines()
    assert line.startswith("error: refused: ") and f"{topic} is " in line, line
    assert len(dlq.written_as_is(dlq.topic)) == before + 1  # only the forged record itself
    assert dlq.written(dlq.orders) == [] and dlq.written(dlq.refunds) == []
    if created:
        assert dlq.written_as_is(topic) == []
    rest = dlq.json("replay", "--group", dlq.group, "--original-topic", dlq.orders,
                    "--original-topic", dlq.refunds, "--yes")
    assert rest["replayed_by_target"] == {dlq.orders: 3, dlq.refunds: 1}


def test_replay_sends_each_wait_id_once(dlq: Dlq) -> None:
    """A wait id in the DLQ twice (a pod's DLQ record plus a late expiry) is replayed once."""
    http_500, refund = dlq.sources[1], dlq.sources[3]
    add_dlq_records(dlq, [(0, refund, EXPIRED), (1, http_500, EXPIRED)])
    replayed = dlq.json("replay", "--group", dlq.group, "--yes")
    assert replayed["replayed_by_target"] == {dlq.orders: 3, dlq.refunds: 1}
    assert replayed["duplicate_wait_id"] == 2
    assert dlq.each_original_written_once()
    again = dlq.json("replay", "--group", dlq.group, "--yes")
    assert (again["replayed"], again["already_replayed"]) == (0, 6)


def test_a_wait_id_replayed_before_counts_as_replayed(dlq: Dlq) -> None:
    """A wait id replayed once, then expired into the DLQ again: not replayed a second time."""
    first = dlq.json("replay", "--group", dlq.group, "--original-topic", dlq.refunds, "--yes")
    assert first["replayed_by_target"] == {dlq.refunds: 1}
    add_dlq_records(dlq, [(0, dlq.sources[3], EXPIRED)])
    rest = dlq.json("replay", "--group", dlq.group, "--yes")
    assert rest["replayed_by_target"] == {dlq.orders: 3}
    assert rest["already_replayed"] == 2
    assert dlq.written(dlq.refunds) == dlq.originals[dlq.refunds]


def test_force_replays_every_dlq_record_of_a_wait_id_once(dlq: Dlq) -> None:
    """`--force` sends each selected DLQ record, duplicates of a wait id too; each DLQ record
    is still replayed once."""
    add_dlq_records(dlq, [(0, dlq.sources[3], EXPIRED)])
    forced = dlq.json("replay", "--group", dlq.group, "--force", "--yes")
    assert forced["replayed_by_target"] == {dlq.orders: 3, dlq.refunds: 2}
    assert dlq.written(dlq.refunds) == dlq.originals[dlq.refunds] * 2
    assert dlq.json("replay", "--group", dlq.group, "--force", "--yes")["replayed"] == 0


def test_waitline_dlq_runs_as_a_command(dlq: Dlq) -> None:
    completed = subprocess.run(
        [sys.executable, "-m", "dispatcher", "dlq", "stats", "--group", dlq.group, "--output",
         "json"],
        capture_output=True, text=True, timeout=60, check=False,
        env={**os.environ, "WAITLINE_BOOTSTRAP_SERVERS": dlq.bootstrap},
    )
    assert completed.returncode == 0, completed.stderr
    assert json.loads(completed.stdout)["total"] == 5


def kafka_config(dlq: Dlq) -> KafkaConfig:
    return KafkaConfig(dlq.bootstrap, "test")


async def plan_and_replay(dlq: Dlq) -> ReplayOutcome:
    async with KafkaSession(kafka_config(dlq)) as session:
        plan = await session.plan_replay(dlq.topic, ReplayRequest(), 5, QuietObserver())
        return await execute_replay(session, dlq.topic, plan, QuietObserver())


def test_records_replayed_while_the_operator_confirms_are_not_replayed_again(dlq: Dlq) -> None:
    """A plan made, then another replay, then the plan carried out: it replays nothing."""

    async def race() -> tuple[ReplayOutcome, ReplayOutcome]:
        async with KafkaSession(kafka_config(dlq)) as session:
            plan = await session.plan_replay(dlq.topic, ReplayRequest(), 5, QuietObserver())
            other = await plan_and_replay(dlq)  # while "the operator is asked"
            return other, await execute_replay(session, dlq.topic, plan, QuietObserver())

    other, late = asyncio.run(race())
    assert other.replayed.total() == 4
    assert late.replayed.total() == 0
    assert late.plan.replayed_meanwhile == 4
    assert dlq.each_original_written_once()


class ReplayElsewhereWhenWriting:
    """An observer that, as a replay starts re-reading the DLQ to write, runs a whole other
    replay of the same DLQ (in another thread and event loop) before letting it go on."""

    def __init__(self, dlq: Dlq) -> None:
        self._dlq = dlq
        self.other: ReplayOutcome | None = None

    def scanning(self, topic: str, total_offsets: int) -> None:
        if topic == self._dlq.topic and self.other is None:
            worker = threading.Thread(target=self._replay_elsewhere)
            worker.start()
            worker.join()

    def advanced(self, offsets: int) -> None:
        pass

    def _replay_elsewhere(self) -> None:
        self.other = asyncio.run(plan_and_replay(self._dlq))


def test_a_replay_started_meanwhile_fences_the_running_one(dlq: Dlq) -> None:
    """Two replays of one DLQ at once: the later one fences the earlier, which then writes
    nothing, so each original is still replayed exactly once."""
    elsewhere = ReplayElsewhereWhenWriting(dlq)

    async def fenced() -> None:
        async with KafkaSession(kafka_config(dlq)) as session:
            plan = await session.plan_replay(dlq.topic, ReplayRequest(), 5, QuietObserver())
            await execute_replay(session, dlq.topic, plan, elsewhere)

    with pytest.raises(ProduceError, match=r"another `waitline dlq replay` .* took over"):
        asyncio.run(fenced())
    # aiokafka leaves the fenced producer's failed futures unretrieved; collect them here, where
    # their finalizers may log, rather than at a random later point (CPython 3.11's parser
    # raises SystemError when such a finalizer runs during `ast.parse`).
    gc.collect()
    assert elsewhere.other is not None
    assert elsewhere.other.replayed.total() == 4
    assert dlq.each_original_written_once()


def test_unreachable_kafka_is_one_line_and_exit_1(dlq: Dlq) -> None:
    result = CliRunner().invoke(app, ["stats", "--group", dlq.group,
                                      "--bootstrap-servers", "127.0.0.1:9"])
    assert result.exit_code == 1, result.output
    assert result.stderr.startswith("error: cannot reach Kafka at 127.0.0.1:9")
    assert "Traceback" not in result.output
