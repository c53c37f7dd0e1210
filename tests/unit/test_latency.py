"""Latency models: parsing, decisions, determinism, shares and mean arithmetic."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from dispatcher.errors import ConfigError
from loadtest.cli import app
from loadtest.mock.latency import (
    Decision,
    FixedLatency,
    LatencyModel,
    MixLatency,
    SeedLatency,
    parse_model,
)

pytestmark = pytest.mark.unit

DISTINCT_BODIES = [f'{{"operationId":"op-{i}","additionalData":"{i % 10}"}}'.encode()
                   for i in range(20_000)]
# Binomial standard deviation at p=0.5 over 20,000 draws is 0.0035: 0.015 is over 4 sigma.
SHARE_TOLERANCE = 0.015


def seed_body(additional_data: object) -> bytes:
    return json.dumps({"operationId": "x", "additionalData": additional_data}).encode()


def share(decisions: list[Decision], predicate: object) -> float:
    assert callable(predicate)
    return sum(1 for decision in decisions if predicate(decision)) / len(decisions)


# --- parsing -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("seed", LatencyModel(SeedLatency())),
        ("fixed:200", LatencyModel(FixedLatency(200.0))),
        ("fixed:0.5", LatencyModel(FixedLatency(0.5))),
        ("mix:0.9@200,0.1@1000", LatencyModel(MixLatency(((0.9, 200.0), (0.1, 1000.0))))),
        ("seed+hang:0.05", LatencyModel(SeedLatency(), hang_rate=0.05)),
        ("fixed:200+errors:0.01", LatencyModel(FixedLatency(200.0), error_rate=0.01)),
        ("hang:0.1", LatencyModel(SeedLatency(), hang_rate=0.1)),
        ("errors:0.2+hang:0.1", LatencyModel(SeedLatency(), hang_rate=0.1, error_rate=0.2)),
        (" Fixed:10 + HANG:0.5 ", LatencyModel(FixedLatency(10.0), hang_rate=0.5)),
    ],
)
def test_parse_model_builds_the_model_the_spec_names(spec: str, expected: LatencyModel) -> None:
    assert parse_model(spec) == expected


@pytest.mark.parametrize(
    ("spec", "canonical"),
    [
        ("seed", "seed"),
        ("fixed:200.0", "fixed:200"),
        ("mix:0.9@200,0.1@1000", "mix:0.9@200,0.1@1000"),
        ("errors:0.01+hang:0.05", "seed+hang:0.05+errors:0.01"),
        ("seed+hang:0", "seed"),
        ("fixed:0.25+errors:1", "fixed:0.25+errors:1"),
    ],
)
def test_str_gives_the_canonical_spec(spec: str, canonical: str) -> None:
    assert str(parse_model(spec)) == canonical


shares = st.floats(min_value=0, max_value=1, allow_nan=False)
delays_ms = st.floats(min_value=0, max_value=1e7, allow_nan=False)


@st.composite
def models(draw: st.DrawFn) -> LatencyModel:
    kind = draw(st.sampled_from(["seed", "fixed", "mix"]))
    base: SeedLatency | FixedLatency | MixLatency
    if kind == "seed":
        base = SeedLatency()
    elif kind == "fixed":
        base = FixedLatency(draw(delays_ms))
    else:
        first = draw(st.floats(min_value=0.01, max_value=0.99))
        base = MixLatency(((first, draw(delays_ms)), (1 - first, draw(delays_ms))))
    capacity = draw(st.none() | st.integers(min_value=1, max_value=100_000))
    return LatencyModel(base, hang_rate=draw(shares), error_rate=draw(shares), capacity=capacity)


@given(models())
def test_canonical_spec_parses_back_to_the_same_model(model: LatencyModel) -> None:
    assert parse_model(str(model)) == model


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        ("", "the spec is empty"),
        ("   ", "the spec is empty"),
        ("slow", "unknown component 'slow'"),
        ("seed+fixed:200", "two base components"),
        ("mix:1@5+fixed:200", "two base components"),
        ("hang:0.1+hang:0.2", "hang is given twice"),
        ("fixed", "fixed: '' is not a number"),
        ("fixed:abc", "fixed: 'abc' is not a number"),
        ("fixed:-5", "a delay cannot be negative"),
        ("fixed:inf", "not a finite number"),
        ("hang:1.5", "is not a share in [0, 1]"),
        ("errors:-0.1", "is not a share in [0, 1]"),
        ("hang:nan", "not a finite number"),
        ("mix:0.5@200,0.4@1000", "mix probabilities sum to 0.9, not 1"),
        ("mix:0.5@200,0.6@1000", "mix probabilities sum to 1.1, not 1"),
        ("mix:1", "mix item '1' is not P@MS"),
        ("mix:", "mix item '' is not P@MS"),
        ("mix:0@5,1@10", "has probability 0"),
        ("seed:5", "seed takes no argument"),
        ("seed++hang:0.1", "unknown component ''"),
    ],
)
def test_bad_specs_raise_config_error_naming_the_problem_and_valid_forms(
    spec: str, problem: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_model(spec)
    message = str(caught.value)
    assert problem in message
    assert repr(spec) in message
    assert "seed | fixed:MS | mix:P@MS,P@MS,... | hang:RATE | errors:RATE" in message


def test_mix_probabilities_within_tolerance_of_one_are_accepted() -> None:
    model = parse_model("mix:0.1@1,0.2@2,0.7@3")  # 0.1 + 0.2 + 0.7 != 1.0 in binary
    assert isinstance(model.base, MixLatency)


# --- decisions -----------------------------------------------------------------------------


def test_seed_is_one_second_for_additional_data_zero_and_200ms_otherwise() -> None:
    model = parse_model("seed")
    assert model.decide(seed_body("0")) == Decision(delay_s=1.0, hang=False, status=200)
    for other in ["1", "9", "00", 0, None]:
        assert model.decide(seed_body(other)) == Decision(delay_s=0.2, hang=False, status=200)


@pytest.mark.parametrize("body", [b"", b"not json", b"\xff\xfe", b"[1,2]", b'"0"', b"{}"])
def test_seed_treats_bodies_without_additional_data_as_fast(body: bytes) -> None:
    assert parse_model("seed").decide(body).delay_s == 0.2


def test_fixed_delays_every_request_alike() -> None:
    model = parse_model("fixed:150")
    assert {model.decide(body) for body in DISTINCT_BODIES[:500]} == {
        Decision(delay_s=0.15, hang=False, status=200)
    }


def test_mix_delays_follow_the_probabilities() -> None:
    model = parse_model("mix:0.9@200,0.1@1000")
    decisions = [model.decide(body) for body in DISTINCT_BODIES]
    assert {decision.delay_s for decision in decisions} == {0.2, 1.0}
    assert share(decisions, lambda d: d.delay_s == 1.0) == pytest.approx(0.1, abs=SHARE_TOLERANCE)


def test_mix_with_three_choices_uses_each_at_its_share() -> None:
    model = parse_model("mix:0.5@10,0.3@20,0.2@30")
    decisions = [model.decide(body) for body in DISTINCT_BODIES]
    for delay_s, expected in [(0.01, 0.5), (0.02, 0.3), (0.03, 0.2)]:
        assert share(decisions, lambda d, s=delay_s: d.delay_s == s) == pytest.approx(
            expected, abs=SHARE_TOLERANCE
        )


def test_hang_share_matches_the_rate_and_hangs_never_answer_in_time() -> None:
    model = parse_model("seed+hang:0.05")
    decisions = [model.decide(body) for body in DISTINCT_BODIES]
    hangs = [decision for decision in decisions if decision.hang]
    assert len(hangs) / len(decisions) == pytest.approx(0.05, abs=SHARE_TOLERANCE)
    assert all(math.isinf(hang.delay_s) and hang.status == 504 for hang in hangs)
    assert all(decision.status == 200 for decision in decisions if not decision.hang)


def test_errors_share_matches_the_rate_and_keeps_the_base_delay() -> None:
    model = parse_model("fixed:200+errors:0.2")
    decisions = [model.decide(body) for body in DISTINCT_BODIES]
    assert share(decisions, lambda d: d.status == 503) == pytest.approx(0.2, abs=SHARE_TOLERANCE)
    assert all(decision.delay_s == 0.2 and not decision.hang for decision in decisions)


def test_hang_and_errors_are_independent_and_hang_wins() -> None:
    model = parse_model("fixed:1+hang:0.3+errors:0.5")
    decisions = [model.decide(body) for body in DISTINCT_BODIES]
    answered = [decision for decision in decisions if not decision.hang]
    assert share(decisions, lambda d: d.hang) == pytest.approx(0.3, abs=SHARE_TOLERANCE)
    # Independent fractions: the error share among answered requests is still the error rate.
    assert share(answered, lambda d: d.status == 503) == pytest.approx(0.5, abs=SHARE_TOLERANCE)


def test_seed_slow_records_stay_slow_alongside_errors() -> None:
    model = parse_model("seed+errors:0.5")
    decisions = [model.decide(body) for body in DISTINCT_BODIES]
    slow = [d for d, body in zip(decisions, DISTINCT_BODIES, strict=True)
            if b'"additionalData":"0"' in body]
    assert {decision.delay_s for decision in slow} == {1.0}
    assert share(decisions, lambda d: d.delay_s == 1.0) == pytest.approx(0.1, abs=1e-12)


def test_rates_of_zero_and_one_are_never_and_always() -> None:
    bodies = DISTINCT_BODIES[:2000]
    assert not any(parse_model("hang:0+errors:0").decide(body).hang for body in bodies)
    assert all(parse_model("hang:1").decide(body).hang for body in bodies)
    assert all(parse_model("fixed:1+errors:1").decide(body).status == 503 for body in bodies)


@given(st.binary(max_size=300))
def test_the_same_body_always_gets_the_same_decision(body: bytes) -> None:
    model = parse_model("mix:0.3@10,0.7@20+hang:0.2+errors:0.3")
    assert model.decide(body) == model.decide(bytes(body))
    assert parse_model(str(model)).decide(body) == model.decide(body)


# --- mean latency --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "deadline_s", "expected"),
    [
        ("seed", 60.0, 0.1 * 1.0 + 0.9 * 0.2),
        ("seed+hang:0.05", 60.0, 0.95 * 0.28 + 0.05 * 60),
        ("fixed:200", 60.0, 0.2),
        ("fixed:90000", 60.0, 60.0),  # a single delay longer than the deadline is cut at it
        ("seed", 0.5, 0.1 * 0.5 + 0.9 * 0.2),
        ("mix:0.9@200,0.1@1000", 60.0, 0.9 * 0.2 + 0.1 * 1.0),
        ("mix:0.9@200,0.1@1000", 0.5, 0.9 * 0.2 + 0.1 * 0.5),
        # Errors are retried with the same body until the deadline: the slot is busy for it.
        ("fixed:200+errors:0.01", 60.0, 0.99 * 0.2 + 0.01 * 60),
        ("fixed:200+hang:0.1+errors:0.5", 10.0, 0.9 * 0.5 * 0.2 + (0.1 + 0.9 * 0.5) * 10),
        ("hang:1", 60.0, 60.0),
    ],
)
def test_mean_latency_arithmetic(spec: str, deadline_s: float, expected: float) -> None:
    assert parse_model(spec).mean_latency_s(deadline_s) == pytest.approx(expected, rel=1e-12)


def test_seed_mean_is_028_seconds() -> None:
    assert parse_model("seed").mean_latency_s(60.0) == pytest.approx(0.28, rel=1e-12)


def test_empirical_mean_matches_the_computed_mean() -> None:
    model = parse_model("mix:0.8@100,0.2@2000+hang:0.05+errors:0.02")
    deadline_s = 30.0
    busy = [deadline_s if d.hang or d.status == 503 else min(d.delay_s, deadline_s)
            for d in (model.decide(body) for body in DISTINCT_BODIES)]
    assert sum(busy) / len(busy) == pytest.approx(model.mean_latency_s(deadline_s), rel=0.05)


# --- the CLI's handling of a bad spec ------------------------------------------------------


def test_cli_rejects_a_bad_model_with_exit_code_2_and_no_traceback() -> None:
    result = CliRunner().invoke(app, ["counterparty", "--model", "fixed:fast"])
    assert result.exit_code == 2
    assert "invalid latency model 'fixed:fast'" in result.output
    assert "Traceback" not in result.output
