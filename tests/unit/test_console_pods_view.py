"""The pods view's assembly (pure): members with their partitions, lag and time since the last
commit (stamped by the pod, or told by the console's samples), each joined with its pod's status
by member id; a member with no partitions; a pod that stops answering keeps its last-seen time;
endpoints that left the DNS name are forgotten after a while; the lag history stays bounded."""

from __future__ import annotations

from typing import Any

import pytest

from dispatcher.console.auth import Principal
from dispatcher.console.lag_history import LagHistory, Sample, lag_chart, lag_lines
from dispatcher.console.pod_status import dns_target, status_url
from dispatcher.console.pods import (
    Committed,
    GroupSnapshot,
    Member,
    NotAStatusDocumentError,
    PodRoster,
    SinceHow,
    as_json,
    group_view,
    parse_status,
    quiet_pods,
    since_commit,
)
from dispatcher.console.pods_page import pods_page
from dispatcher.console.sampler import load_watch_settings
from dispatcher.console.settings import Role
from dispatcher.errors import ConfigError

pytestmark = pytest.mark.unit

NOW = 1_750_000_000_000
URL_A, URL_B = "http://10.0.0.5:9100/status", "http://10.0.0.6:9100/status"


def _doc(member_id: str, **fields: Any) -> dict[str, Any]:
    return {"version": 1, "group": "payments", "client_id": "waitline", "member_id": member_id,
            "host": "pod-a", "mode": "at-least-once", "ready": True,
            "window": {"limit": 100, "configured": 100, "adaptive": False, "loop_cap": 100},
            "calls": {"running": 90, "waiting": 3}, "in_flight": 93,
            "records": {"CALLING": 90, "AWAITING_SLOT": 3},
            "stalled": [{"topic": "orders", "partition": 0, "offset": 41, "state": "CALLING",
                         "waiting_for": "its call to end", "age_seconds": 75.5}],
            "stalled_count": 1, "stalled_after_seconds": 60,
            "breaker": {"state": "open", "config": "failure-rate=50%"},
            "rate_limit": {"per_second": 500, "burst": 25}, **fields}


def _snapshot(members: tuple[Member, ...], **committed: Committed) -> GroupSnapshot:
    return GroupSnapshot(
        "payments", "Stable", members,
        {("orders", int(p[1:])): c for p, c in committed.items()},
        {("orders", 0): 1000, ("orders", 1): 500, ("orders", 2): 70}, NOW)


A = Member("waitline-aaa", "waitline", "10.0.0.5", (("orders", 0), ("orders", 1)))
IDLE = Member("waitline-zzz", "waitline", "10.0.0.7", ())


def test_members_have_their_partitions_lag_and_stamped_commit_time() -> None:
    snapshot = _snapshot((A,), p0=Committed(900, NOW - 12_000), p1=Committed(500, None))
    roster = PodRoster([URL_A], forget_s=900)
    roster.targets(None, NOW)
    roster.answered(URL_A, parse_status(_doc("waitline-aaa")), NOW - 3000)
    view = group_view(snapshot, roster.sightings(), {}, NOW)
    row = view.members[0]
    assert [(p.partition, p.committed, p.end, p.lag) for p in row.partitions] == [
        (0, 900, 1000, 100), (1, 500, 500, 0)]
    assert row.partitions[0].since_commit is not None
    assert row.partitions[0].since_commit.seconds == 12
    assert row.partitions[0].since_commit.how is SinceHow.STAMPED
    assert row.partitions[1].since_commit is None  # not ours, and no samples yet
    assert row.lag == 100 and view.lag == 100
    assert row.pod is not None and row.pod.answering and row.pod.seen_ago_s == 3
    status = row.pod.status
    assert (status.in_flight, status.window.limit if status.window else None) == (93, 100)
    assert status.stalled[0].state == "CALLING" and status.stalled[0].age_seconds == 75.5
    assert status.breaker is not None and status.breaker.state == "open"
    assert status.rate_limit is not None and status.rate_limit.per_second == 500
    assert quiet_pods([view], roster.sightings(), NOW) == []


def test_a_member_with_no_partitions_is_listed_idle_and_unheld_partitions_apart() -> None:
    snapshot = _snapshot((A, IDLE), p0=Committed(900, None), p2=Committed(70, None))
    view = group_view(snapshot, [], {}, NOW)
    idle = next(m for m in view.members if m.member.member_id == "waitline-zzz")
    assert idle.partitions == [] and idle.lag == 0 and idle.pod is None
    assert [(r.partition, r.lag) for r in view.unassigned] == [(2, 0)]
    assert as_json(view)["members"][1]["partitions"] == []


def test_a_pod_that_stops_answering_shows_as_such_with_its_last_seen_time() -> None:
    roster = PodRoster([URL_A], forget_s=900)
    roster.targets(None, NOW - 60_000)
    roster.answered(URL_A, parse_status(_doc("waitline-aaa")), NOW - 60_000)
    roster.targets(None, NOW)
    roster.failed(URL_A, "cannot connect: Connection refused", NOW)
    view = group_view(_snapshot((A,)), roster.sightings(), {}, NOW)
    pod = view.members[0].pod
    assert pod is not None and not pod.answering
    assert pod.seen_ago_s == 60 and pod.error == "cannot connect: Connection refused"
    assert pod.status.in_flight == 93  # what it said last
    # Once it has left the group, it is listed among the pods that speak for no member.
    gone = group_view(_snapshot(()), roster.sightings(), {}, NOW)
    [quiet] = quiet_pods([gone], roster.sightings(), NOW)
    assert (quiet.url, quiet.answering, quiet.seen_ago_s) == (URL_A, False, 60)


def test_a_pod_never_seen_has_no_last_seen_time() -> None:
    roster = PodRoster([URL_A], forget_s=900)
    roster.targets(None, NOW)
    roster.failed(URL_A, "no answer in time", NOW)
    [quiet] = quiet_pods([group_view(_snapshot((A,)), roster.sightings(), {}, NOW)],
                         roster.sightings(), NOW)
    assert (quiet.answering, quiet.seen_ago_s, quiet.error) == (False, None, "no answer in time")


def test_dns_addresses_that_left_are_kept_until_forgotten_and_configured_ones_never() -> None:
    roster = PodRoster([URL_A], forget_s=300)
    assert sorted(roster.targets([URL_B], NOW)) == [URL_A, URL_B]
    roster.answered(URL_B, [], NOW)
    assert sorted(roster.targets([], NOW + 200_000)) == [URL_A, URL_B]  # unready: asked on
    assert [s.in_dns for s in roster.sightings()] == [True, False]
    assert roster.targets(None, NOW + 250_000) == [URL_A, URL_B]  # DNS failed: forgets nothing
    assert roster.targets([], NOW + 301_000) == [URL_A]
    roster.failed(URL_A, "x", NOW + 10**9)
    assert roster.targets([], NOW + 10**9) == [URL_A]


def test_the_roster_is_bounded() -> None:
    roster = PodRoster([], forget_s=300, max_pods=3)
    urls = [f"http://10.0.0.{i}:9100/status" for i in range(10)]
    assert len(roster.targets(urls, NOW)) == 3


def test_a_worker_pod_is_one_member_per_worker_and_bad_answers_are_refused() -> None:
    workers = parse_status({"version": 1, "workers": [
        {"worker": 0, **_doc("m-0")}, {"worker": 1, "error": "not answering"}]})
    assert [(w.worker, w.member_id, w.error) for w in workers] == [
        (0, "m-0", None), (1, None, "not answering")]
    for bad in ([], {"version": 2}, {"version": 1, "workers": 3},
                {"version": 1, "window": {"limit": "lots"}}):
        with pytest.raises(NotAStatusDocumentError):
            parse_status(bad)


def test_since_commit_prefers_the_stamp_then_the_samples() -> None:
    stamped = since_commit(Committed(5, NOW - 1000), (NOW - 99_000, True), NOW)
    assert stamped is not None and (stamped.seconds, stamped.how) == (1, SinceHow.STAMPED)
    seen = since_commit(Committed(5, None), (NOW - 30_000, True), NOW)
    assert seen is not None and (seen.seconds, seen.how) == (30, SinceHow.ABOUT)
    flat = since_commit(Committed(5, None), (NOW - 3_600_000, False), NOW)
    assert flat is not None and flat.how is SinceHow.AT_LEAST
    assert since_commit(None, None, NOW) is None
    assert since_commit(Committed(5, NOW + 5000), None, NOW).seconds == 0  # type: ignore[union-attr]


def _sample(at_ms: int, committed: int, end: int) -> GroupSnapshot:
    return GroupSnapshot("payments", "Stable", (), {("orders", 0): Committed(committed, None)},
                         {("orders", 0): end}, at_ms)


def test_the_samples_tell_since_when_a_committed_offset_has_not_moved() -> None:
    history = LagHistory(interval_s=30)
    for i, committed in enumerate([10, 10, 20, 20, 20]):
        history.record(_sample(NOW + i * 30_000, committed, 50))
    assert history.unchanged_since("payments") == {("orders", 0): (NOW + 60_000, True)}
    still = LagHistory(interval_s=30)
    for i in range(3):
        still.record(_sample(NOW + i * 30_000, 7, 50))
    assert still.unchanged_since("payments") == {("orders", 0): (NOW, False)}


def test_the_lag_history_keeps_one_hour_and_a_bounded_number_of_series() -> None:
    history = LagHistory(interval_s=30, span_s=3600, max_series=4)
    for i in range(500):
        history.record(_sample(NOW + i * 30_000, i, i + 7))
    [series] = history.series("payments").values()
    assert len(series) == 121 and series[-1].lag == 7
    assert NOW + 499 * 30_000 - series[0].at_ms <= 3_600_000
    many = GroupSnapshot("payments", "Stable", (), {},
                         {("orders", p): 10 for p in range(10)}, NOW)
    history.record(many)
    assert len(history.series("payments")) == 4
    [(label, points)] = list(lag_lines({("orders", 0): series[-2:]}, NOW + 499 * 30_000))
    assert label == "orders/0" and points == [(-30.0, 7.0), (0.0, 7.0)]


def test_pod_addresses_and_settings_are_checked_with_one_clear_line() -> None:
    assert status_url("http://10.0.0.5:9100") == URL_A
    assert status_url("http://10.0.0.5:9100/status") == URL_A
    assert dns_target("svc.ns.svc:9100") == ("svc.ns.svc", 9100)
    for bad in ("10.0.0.5:9100", "ftp://x/", "http://"):
        with pytest.raises(ConfigError, match="pod status URL"):
            status_url(bad)
    for bad in ("svc", "svc:0", "svc:http", ":9100"):
        with pytest.raises(ConfigError, match="NAME:PORT"):
            dns_target(bad)
    with pytest.raises(ConfigError, match="WAITLINE_CONSOLE_POD_STATUS_DNS"):
        load_watch_settings(pod_status_dns="svc")
    settings = load_watch_settings(pod_status_urls=" http://a:1, http://b:2/status ,")
    assert settings.urls == ["http://a:1", "http://b:2/status"] and settings.dns is None


def test_the_lag_chart_spans_the_samples_held_from_five_minutes_to_an_hour() -> None:
    young = {("orders", 0): [Sample(NOW - 90_000, 1, 5), Sample(NOW, 1, 9)]}
    chart = lag_chart("lag", "payments", young, NOW)
    assert "last 5 min (since the console began)" in chart
    assert [t for t in ("5", "4", "3", "2", "1", "0") if f">{t}</text>" in chart] == [
        "5", "4", "3", "2", "1", "0"]
    old = {("orders", 0): [Sample(NOW - 7_200_000, 1, 5), Sample(NOW, 1, 9)]}
    chart = lag_chart("lag", "payments", old, NOW)
    assert "Lag per partition of payments, last hour" in chart and ">60</text>" in chart
    assert "No lag sampled yet" in lag_chart("lag", "payments", {}, NOW)


def test_the_page_says_states_in_words_escapes_names_and_marks_what_a_quiet_pod_said() -> None:
    hostile = Member("m<script>", "<script>alert(1)</script>", "10.0.0.5", (("orders", 0),))
    roster = PodRoster([URL_A, URL_B], forget_s=900)
    roster.targets(None, NOW - 60_000)
    roster.answered(URL_A, parse_status(_doc("m<script>")), NOW - 60_000)
    roster.failed(URL_A, "no answer in time", NOW)
    roster.answered(URL_B, parse_status(_doc("waitline-aaa")), NOW)
    view = group_view(_snapshot((hostile, A), p0=Committed(900, NOW - 5000)),
                      roster.sightings(), {}, NOW)
    html = pods_page(Principal("ops", Role.VIEWER, None), [view], ["<svg></svg>"], [],
                     configured=True, problems=["Kafka not read: <b>x</b>"],
                     sampled_ago_s=3, interval_s=30, now_ms=NOW)
    assert "<script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "not answering" in html and "(no answer in time); last seen" in html
    assert "as last seen:" in html and "&lt;b&gt;x&lt;/b&gt;" in html
    stalled = html.split('class="stalled"')[1].split("</table>")[0]
    assert "waitline @ 10.0.0.5" in stalled and "alert" not in stalled  # only the answering pod
    assert "1 min" not in html and "1m00s ago" in html
    assert "2 members" in html and "5s" in html
