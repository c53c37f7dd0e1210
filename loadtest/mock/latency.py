"""Latency models: how the mock counterparty answers one request, decided from its body alone.

A model is written as a spec string of `+`-joined components:

    seed               the reference mock: JSON additionalData == "0" -> 1 s, else 200 ms
    fixed:MS           every request takes MS milliseconds
    mix:P@MS,P@MS,...  MS with probability P (the probabilities sum to 1)
    hang:RATE          that share of requests never answers in time
    errors:RATE        that share answers 503 after its base delay
    capacity:C         a server that serves C calls at a time: a call arriving while n > C
                       calls are in flight (itself included) takes its base delay * n / C, so
                       throughput stays C / base delay however many are sent; one arriving
                       while n > 2C answers 503 at once (the server sheds load)

At most one base component (seed, fixed, mix); `seed` when only hang/errors/capacity are given.
Examples: `seed`, `seed+hang:0.05`, `fixed:200+errors:0.01`, `mix:0.9@200,0.1@1000`,
`fixed:100+capacity:50`.

Every decision is a pure function of the body bytes (and, with `capacity`, of the calls in
flight when it arrives): the random fractions a component needs come from a SHA-256 of the body,
so both dispatch modes meet the same slow records and a retry of a record meets the same fate as
its first call.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from typing import Protocol

from dispatcher.errors import ConfigError

OK_STATUS = 200
ERROR_STATUS = 503
HANG_STATUS = 504  # what a held request gets if its client is still there after hang_s

SEED_SLOW_S = 1.0
SEED_FAST_S = 0.2
# The generator writes additionalData = counter mod 10, so "0" is one record in ten.
SEED_SLOW_SHARE = 0.1

MIX_SUM_TOLERANCE = 1e-9

VALID_FORMS = (
    "valid components, joined by '+': seed | fixed:MS | mix:P@MS,P@MS,... | hang:RATE | "
    "errors:RATE | capacity:C (at most one of seed/fixed/mix; RATE and P in [0, 1], mix P "
    "summing to 1, C a whole number ≥ 1), e.g. seed+hang:0.05, mix:0.9@200,0.1@1000 or "
    "fixed:100+capacity:50"
)


@dataclass(frozen=True)
class Decision:
    """How to answer one request: wait `delay_s` then answer `status`.

    A hang has `delay_s = inf`: the server holds it for its own `hang_s` (or until the client
    goes away) and then answers `status` (504).
    """

    delay_s: float
    hang: bool
    status: int


class BaseLatency(Protocol):
    """The delay part of a model; `fraction` is uniform in [0, 1) and derived from the body."""

    def delay_s(self, body: bytes, fraction: float) -> float: ...

    def mean_s(self, cap_s: float) -> float:
        """Expected delay with every single delay capped at `cap_s`."""
        ...


@dataclass(frozen=True)
class SeedLatency:
    """The reference mock: 1 s when the JSON body's additionalData is "0", else 200 ms."""

    def delay_s(self, body: bytes, fraction: float) -> float:
        return SEED_SLOW_S if _additional_data(body) == "0" else SEED_FAST_S

    def mean_s(self, cap_s: float) -> float:
        # Assumes additionalData uniform over "0".."9", as the generator writes it.
        return (SEED_SLOW_SHARE * min(SEED_SLOW_S, cap_s)
                + (1 - SEED_SLOW_SHARE) * min(SEED_FAST_S, cap_s))

    def __str__(self) -> str:
        return "seed"


@dataclass(frozen=True)
class FixedLatency:
    """Every request takes `delay_ms`."""

    delay_ms: float

    def delay_s(self, body: bytes, fraction: float) -> float:
        return self.delay_ms / 1000

    def mean_s(self, cap_s: float) -> float:
        return min(self.delay_ms / 1000, cap_s)

    def __str__(self) -> str:
        return f"fixed:{_number(self.delay_ms)}"


@dataclass(frozen=True)
class MixLatency:
    """`choices` are (probability, delay_ms) pairs whose probabilities sum to 1."""

    choices: tuple[tuple[float, float], ...]

    def delay_s(self, body: bytes, fraction: float) -> float:
        cumulative = 0.0
        for probability, delay_ms in self.choices:
            cumulative += probability
            if fraction < cumulative:
                return delay_ms / 1000
        # The sum may fall a rounding error short of 1: the last choice takes the remainder.
        return self.choices[-1][1] / 1000

    def mean_s(self, cap_s: float) -> float:
        return sum(probability * min(delay_ms / 1000, cap_s)
                   for probability, delay_ms in self.choices)

    def __str__(self) -> str:
        items = ",".join(f"{_number(p)}@{_number(ms)}" for p, ms in self.choices)
        return f"mix:{items}"


@dataclass(frozen=True)
class LatencyModel:
    """A base latency plus the shares of requests that hang or answer 503, and optionally a
    capacity: how many calls the server serves at once before it slows down."""

    base: BaseLatency
    hang_rate: float = 0.0
    error_rate: float = 0.0
    capacity: int | None = None

    def decide(self, body: bytes, in_flight: int = 1) -> Decision:
        """The answer to a request with this body arriving while `in_flight` calls (itself
        included) are held; without a capacity the same body always gets the same answer."""
        base_fraction, hang_fraction, error_fraction = _fractions(body)
        if self.capacity is not None and in_flight > 2 * self.capacity:
            return Decision(delay_s=0.0, hang=False, status=ERROR_STATUS)
        if hang_fraction < self.hang_rate:
            return Decision(delay_s=math.inf, hang=True, status=HANG_STATUS)
        delay_s = self.base.delay_s(body, base_fraction)
        if self.capacity is not None and in_flight > self.capacity:
            delay_s *= in_flight / self.capacity
        status = ERROR_STATUS if error_fraction < self.error_rate else OK_STATUS
        return Decision(delay_s=delay_s, hang=False, status=status)

    def bound_tps(self, concurrency: float, deadline_s: float) -> float:
        """Little's-law bound on throughput with `concurrency` calls in flight: N / mean
        latency, and never more than a capacity's C calls served per base latency."""
        served = concurrency if self.capacity is None else min(concurrency, self.capacity)
        return served / self.mean_latency_s(deadline_s)

    def mean_latency_s(self, deadline_s: float) -> float:
        """Expected time one dispatcher slot stays busy per record, for Little's-law bounds.

        A hang holds the slot until the deadline. So does an error: the client retries 503s
        within the deadline, and a retry of the same body meets the same 503, so an erroring
        record is retried until its deadline runs out. Every other record holds its slot for
        its base delay, capped at the deadline. The three fractions are independent, and a hang
        takes precedence over an error.
        """
        answered_share = 1 - self.hang_rate
        ok_share = answered_share * (1 - self.error_rate)
        return (ok_share * self.base.mean_s(deadline_s)
                + self.hang_rate * deadline_s
                + answered_share * self.error_rate * deadline_s)

    def __str__(self) -> str:
        parts = [str(self.base)]
        if self.hang_rate:
            parts.append(f"hang:{_number(self.hang_rate)}")
        if self.error_rate:
            parts.append(f"errors:{_number(self.error_rate)}")
        if self.capacity is not None:
            parts.append(f"capacity:{self.capacity}")
        return "+".join(parts)


def parse_model(spec: str) -> LatencyModel:
    """The model a spec string describes; raises ConfigError naming the valid forms."""
    base: BaseLatency | None = None
    capacity: int | None = None
    rates: dict[str, float] = {}
    components = [part.strip() for part in spec.strip().lower().split("+")]
    if components == [""]:
        raise _spec_error(spec, "the spec is empty")
    for component in components:
        name, _, argument = component.partition(":")
        if name in ("seed", "fixed", "mix"):
            if base is not None:
                raise _spec_error(spec, f"two base components ({base} and {component})")
            base = _parse_base(spec, name, argument)
        elif name in ("hang", "errors"):
            if name in rates:
                raise _spec_error(spec, f"{name} is given twice")
            rates[name] = _parse_share(spec, name, argument)
        elif name == "capacity":
            if capacity is not None:
                raise _spec_error(spec, "capacity is given twice")
            capacity = _parse_capacity(spec, argument)
        else:
            raise _spec_error(spec, f"unknown component {component!r}")
    return LatencyModel(base=base or SeedLatency(),
                        hang_rate=rates.get("hang", 0.0), error_rate=rates.get("errors", 0.0),
                        capacity=capacity)


def _parse_capacity(spec: str, argument: str) -> int:
    value = _parse_number(spec, "capacity", argument)
    if not value.is_integer() or value < 1:
        raise _spec_error(spec, f"capacity: {argument} is not a whole number of calls ≥ 1")
    return int(value)


def _parse_base(spec: str, name: str, argument: str) -> BaseLatency:
    if name == "seed":
        if argument:
            raise _spec_error(spec, "seed takes no argument")
        return SeedLatency()
    if name == "fixed":
        return FixedLatency(delay_ms=_parse_delay_ms(spec, "fixed", argument))
    choices = []
    for item in argument.split(","):
        probability_text, at, delay_text = item.partition("@")
        if not at:
            raise _spec_error(spec, f"mix item {item!r} is not P@MS")
        probability = _parse_share(spec, f"mix item {item}", probability_text)
        if probability == 0:
            raise _spec_error(spec, f"mix item {item!r} has probability 0")
        choices.append((probability, _parse_delay_ms(spec, f"mix item {item}", delay_text)))
    total = sum(probability for probability, _ in choices)
    if abs(total - 1) > MIX_SUM_TOLERANCE:
        raise _spec_error(spec, f"mix probabilities sum to {total:g}, not 1")
    return MixLatency(choices=tuple(choices))


def _parse_delay_ms(spec: str, where: str, text: str) -> float:
    value = _parse_number(spec, where, text)
    if value < 0:
        raise _spec_error(spec, f"{where}: a delay cannot be negative")
    return value


def _parse_share(spec: str, where: str, text: str) -> float:
    value = _parse_number(spec, where, text)
    if not 0 <= value <= 1:
        raise _spec_error(spec, f"{where}: {text} is not a share in [0, 1]")
    return value


def _parse_number(spec: str, where: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise _spec_error(spec, f"{where}: {text!r} is not a number") from None
    if not math.isfinite(value):
        raise _spec_error(spec, f"{where}: {text!r} is not a finite number")
    return value


def _spec_error(spec: str, problem: str) -> ConfigError:
    return ConfigError(f"invalid latency model {spec!r}: {problem}; {VALID_FORMS}")


def _number(value: float) -> str:
    """The shortest text that parses back to `value` (200 rather than 200.0)."""
    return str(int(value)) if value.is_integer() else repr(value)


def _fractions(body: bytes) -> tuple[float, float, float]:
    """Three independent uniform fractions in [0, 1): base choice, hang, error."""
    digest = hashlib.sha256(body).digest()
    return _fraction(digest[0:8]), _fraction(digest[8:16]), _fraction(digest[16:24])


def _fraction(eight_bytes: bytes) -> float:
    # 53 bits: as many as a float holds exactly, so the result never rounds up to 1.0.
    return (int.from_bytes(eight_bytes) >> 11) / 2**53


def _additional_data(body: bytes) -> object:
    try:
        document = json.loads(body)
    except ValueError:  # not JSON, or not UTF-8 (UnicodeDecodeError is a ValueError)
        return None
    return document.get("additionalData") if isinstance(document, dict) else None
