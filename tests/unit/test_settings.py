"""The pod's settings: flags over environment, durations, cross-field checks, grouped views."""

from __future__ import annotations

import os
from typing import Any

import pytest
from typer.testing import CliRunner

from dispatcher.errors import ConfigError
from dispatcher.flow.adaptive import AdaptiveConfig
from dispatcher.flow.loopguard import LoopGuardConfig
from dispatcher.pod.cli import app
from dispatcher.pod.runner import describe, is_loopback
from dispatcher.pod.settings import DispatchSettings, Mode, load_settings

pytestmark = pytest.mark.unit

REQUIRED = {"input_topic": "orders", "group": "billing",
            "counterparty_url": "http://127.0.0.1:9/calls"}


@pytest.fixture(autouse=True)
def _no_waitline_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Settings read WAITLINE_* variables: a developer's shell must not leak into these tests."""
    for name in list(os.environ):
        if name.startswith("WAITLINE_"):
            monkeypatch.delenv(name)


def settings(**flags: Any) -> DispatchSettings:
    return load_settings(**{**REQUIRED, **flags})


def test_defaults_follow_the_design() -> None:
    loaded = settings()
    window = loaded.window()
    assert window.mode is Mode.AT_LEAST_ONCE
    assert window.concurrency == 100
    assert loaded.deadline == 60.0
    assert window.wait_expiration_s == 3600.0
    assert window.commit_interval_s == 1.0
    assert window.drain_grace_s == 30.0


def test_durations_accept_units_and_bare_seconds() -> None:
    loaded = settings(deadline="250ms", wait_expiration="5m", commit_interval="2",
                      drain_grace="1h", delete_retention="7d")
    assert loaded.deadline == 0.25
    assert loaded.wait_expiration == 300.0
    assert loaded.commit_interval == 2.0
    assert loaded.drain_grace == 3600.0
    assert loaded.delete_retention == 7 * 86400.0


@pytest.mark.parametrize(("expiration", "deadline"), [("2s", "2s"), ("1s", "2s"), ("59s", "1m")])
def test_wait_expiration_not_after_deadline_is_rejected_naming_both_flags(
    expiration: str, deadline: str
) -> None:
    with pytest.raises(ConfigError) as raised:
        settings(wait_expiration=expiration, deadline=deadline)
    message = str(raised.value)
    assert "--wait-expiration" in message
    assert "must exceed --deadline" in message
    assert "WAITLINE_)" not in message  # a cross-field problem is not pinned to a blank variable


def test_an_unreadable_duration_names_its_flag_and_variable() -> None:
    with pytest.raises(ConfigError, match=r"--deadline \(or WAITLINE_DEADLINE\): invalid duration"):
        settings(deadline="soon")


@pytest.mark.parametrize("flag", ["deadline", "commit_interval", "drain_grace"])
def test_a_zero_duration_is_rejected(flag: str) -> None:
    with pytest.raises(ConfigError, match=f"--{flag.replace('_', '-')} .*positive duration"):
        settings(**{flag: "0s"})


def test_every_problem_is_listed_at_once() -> None:
    with pytest.raises(ConfigError) as raised:
        settings(concurrency=0, security_protocol="carrier-pigeon")
    lines = str(raised.value).splitlines()
    assert any(line.strip().startswith("--concurrency (or WAITLINE_CONCURRENCY)")
               for line in lines)
    assert any(line.strip().startswith("--security-protocol") for line in lines)


def test_security_protocol_and_mechanism_are_normalised_to_upper_case() -> None:
    loaded = settings(security_protocol="sasl_ssl", sasl_mechanism="scram-sha-512",
                      sasl_username="u", sasl_password="p")
    assert (loaded.security_protocol, loaded.sasl_mechanism) == ("SASL_SSL", "SCRAM-SHA-512")


def test_a_security_setting_is_checked_with_the_pod_flags_on_one_line() -> None:
    with pytest.raises(ConfigError) as caught:
        settings(security_protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-512")
    assert str(caught.value) == (
        "invalid configuration: WAITLINE_SECURITY_PROTOCOL=SASL_SSL needs "
        "WAITLINE_SASL_USERNAME and WAITLINE_SASL_PASSWORD")


def test_environment_fills_what_flags_leave_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WAITLINE_CONCURRENCY", "7")
    monkeypatch.setenv("WAITLINE_DEADLINE", "5s")
    loaded = settings(deadline="3s")
    assert loaded.concurrency == 7  # from the environment
    assert loaded.deadline == 3.0  # the flag wins


def test_none_means_not_given() -> None:
    assert settings(concurrency=None, wait_topic=None).concurrency == 100


def test_topic_names_default_from_the_group() -> None:
    topics = settings(input_topic=" orders, refunds ,").topics(local_stack=False)
    assert topics.input_topics == ("orders", "refunds")
    assert (topics.wait_topic, topics.dlq_topic, topics.result_topic) == (
        "billing.wait", "billing.dlq", None)


def test_explicit_topic_names_win() -> None:
    topics = settings(wait_topic="w", dlq_topic="d", result_topic="r").topics(local_stack=False)
    assert (topics.wait_topic, topics.dlq_topic, topics.result_topic) == ("w", "d", "r")


def test_an_input_topic_list_naming_no_topic_is_rejected() -> None:
    with pytest.raises(ConfigError, match="--input-topic names no topic"):
        settings(input_topic=" , ")


@pytest.mark.parametrize(("create_flag", "local_stack", "expected"), [
    (None, True, True), (None, False, False), (True, False, True), (False, True, False)])
def test_topics_are_created_by_default_only_on_the_local_stack(
    create_flag: bool | None, local_stack: bool, expected: bool
) -> None:
    topics = settings(create_topics=create_flag).topics(local_stack=local_stack)
    assert topics.create_missing is expected


def test_counterparty_connections_match_the_window() -> None:
    counterparty = settings(concurrency=250, deadline="7s").counterparty()
    assert counterparty.max_connections == 250
    assert settings(concurrency=250, deadline="7s").window().deadline_s == 7.0


@pytest.mark.parametrize(("servers", "loopback"), [
    ("127.0.0.1:9092", True), ("localhost:9092,127.0.0.2:9093", True), ("[::1]:9092", True),
    ("kafka-0:9092", False), ("127.0.0.1:9092,kafka-0:9092", False), ("", False)])
def test_loopback_detection(servers: str, loopback: bool) -> None:
    assert is_loopback(servers) is loopback


def test_cli_rejects_expiration_within_deadline_with_exit_2_and_no_traceback() -> None:
    result = CliRunner().invoke(app, [
        "--input-topic", "orders", "--group", "billing",
        "--counterparty-url", "http://127.0.0.1:9/", "--bootstrap-servers", "127.0.0.1:9",
        "--deadline", "10s", "--wait-expiration", "10s"])
    assert result.exit_code == 2
    assert "error: invalid configuration" in result.stderr
    assert "--wait-expiration (10 s) must exceed --deadline (10 s)" in result.stderr
    assert "Traceback" not in result.output


def test_repeat_filter_holds_back_repeats_and_counts_them() -> None:
    import logging

    from dispatcher.logs import RepeatFilter

    now = [0.0]
    repeat = RepeatFilter(interval_s=5.0, clock=lambda: now[0])

    def record(msg: str) -> logging.LogRecord:
        return logging.LogRecord("aiokafka", logging.ERROR, __file__, 1, msg, None, None)

    assert repeat.filter(record("Unable connect to %s"))
    assert not any(repeat.filter(record("Unable connect to %s")) for _ in range(100))
    assert repeat.filter(record("another message"))
    now[0] = 5.0
    later = record("Unable connect to %s")
    assert repeat.filter(later)
    assert "[100 identical lines held back]" in str(later.msg)


def test_repeat_filter_lets_lines_with_different_content_through() -> None:
    """A pod's rebalance lines share a template but differ in content; holding back all but one
    per 5 s hid which partitions a pod gave up and got during a rebalance storm."""
    import logging

    from dispatcher.logs import RepeatFilter

    repeat = RepeatFilter(interval_s=5.0, clock=lambda: 0.0)

    def record(*args: object) -> logging.LogRecord:
        return logging.LogRecord("dispatcher.pod.engine", logging.INFO, __file__, 1,
                                 "partitions revoked: %s", args, None)

    assert repeat.filter(record("none"))
    assert repeat.filter(record("orders/0, orders/1"))
    assert repeat.filter(record("orders/2"))
    assert not repeat.filter(record("orders/2"))


def test_event_loop_choice_runs_the_coroutine_on_the_chosen_loop() -> None:
    import asyncio

    import uvloop

    from dispatcher.pod.cli import run_event_loop
    from dispatcher.pod.settings import EventLoop

    seen: list[type] = []

    async def record_loop() -> None:
        seen.append(type(asyncio.get_running_loop()))

    run_event_loop(record_loop(), EventLoop.ASYNCIO)
    run_event_loop(record_loop(), EventLoop.AUTO)
    run_event_loop(record_loop(), EventLoop.UVLOOP)
    assert not issubclass(seen[0], uvloop.Loop)
    assert issubclass(seen[1], uvloop.Loop)
    assert issubclass(seen[2], uvloop.Loop)


# --- --concurrency auto ----------------------------------------------------------------------


def test_auto_adapts_within_its_bounds_and_sizes_everything_else_by_the_maximum() -> None:
    loaded = settings(concurrency="auto", min_concurrency=20, max_concurrency=800,
                      bootstrap_servers="127.0.0.1:9092")
    window = loaded.window()
    assert window.adaptive == AdaptiveConfig(min_limit=20, max_limit=800)
    assert window.concurrency == 800  # the fetch and memory bound
    assert loaded.counterparty().max_connections == 800
    kafka = loaded.kafka()
    assert "concurrency=auto[20..800]" in describe(loaded, kafka, loaded.topics(local_stack=True))


def test_auto_is_read_from_the_environment_in_any_case(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WAITLINE_CONCURRENCY", " AUTO ")
    assert settings().adaptive() == AdaptiveConfig()  # 10..5000 by default


def test_a_number_still_gives_a_fixed_window() -> None:
    loaded = settings(concurrency="250")
    assert (loaded.window().concurrency, loaded.window().adaptive) == (250, None)


@pytest.mark.parametrize("value", ["0", "-3", "fast", "1.5", "100001"])
def test_anything_else_is_refused_naming_the_choices(value: str) -> None:
    with pytest.raises(ConfigError, match=r"--concurrency .*1 to 100,000, or auto"):
        settings(concurrency=value)


def test_bounds_that_cross_are_refused() -> None:
    with pytest.raises(ConfigError, match=r"--max-concurrency \(5\) is below --min-concurrency"):
        settings(concurrency="auto", min_concurrency=50, max_concurrency=5)


def test_batch_mode_takes_no_auto_window() -> None:
    with pytest.raises(ConfigError, match="batch mode takes a fixed batch size"):
        settings(concurrency="auto", mode="batch")


def test_the_loop_guard_holds_the_loop_under_25_ms_by_default_and_0_turns_it_off() -> None:
    assert settings().window().loop_guard == LoopGuardConfig(target_lag_s=0.025)
    assert settings(loop_lag_target="40ms").window().loop_guard == LoopGuardConfig(
        target_lag_s=0.04)
    assert settings(loop_lag_target="0").window().loop_guard is None
    assert settings(mode="batch").window().loop_guard is None  # the batch loop has no window


@pytest.mark.parametrize("value", ["-5ms", "fast"])
def test_a_loop_lag_target_that_is_not_a_duration_names_its_flag(value: str) -> None:
    with pytest.raises(ConfigError, match="--loop-lag-target"):
        settings(loop_lag_target=value)


def test_under_ordering_the_rebalance_timeout_defaults_to_outlast_two_deadlines() -> None:
    """A revoke waits at most half the rebalance timeout for calls in flight; under --ordering
    that half must hold a whole call, so the default grows with --deadline."""
    base = {"input_topic": "t", "group": "g", "counterparty_url": "http://127.0.0.1:1/"}
    assert load_settings(**base).window().rebalance_timeout_s == 60
    assert load_settings(**base, ordering="key").window().rebalance_timeout_s == 150
    assert load_settings(**base, ordering="key", deadline="5s").window().rebalance_timeout_s == 60


def test_under_ordering_a_rebalance_timeout_within_two_deadlines_is_refused() -> None:
    base = {"input_topic": "t", "group": "g", "counterparty_url": "http://127.0.0.1:1/"}
    with pytest.raises(ConfigError, match=r"--rebalance-timeout \(60 s\) must exceed twice "
                                          r"--deadline \(60 s\) under --ordering key"):
        load_settings(**base, ordering="key", rebalance_timeout="60s")
    assert load_settings(**base, rebalance_timeout="60s").window().rebalance_timeout_s == 60
