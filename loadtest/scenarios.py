"""The load-test scenarios: which modes, windows and latency models run, with how many records.

Record counts give each run at least ~20 s of steady state after its warm-up at the throughput
it can reach (the Little's-law bound for at-least-once, about N / slowest call for batch);
`max_duration_s` caps runs that cannot finish (batch under a timeout storm).
"""

from __future__ import annotations

from dataclasses import dataclass

from dispatcher.errors import ConfigError


@dataclass(frozen=True)
class RunSpec:
    mode: str  # "batch" | "at-least-once"
    concurrency: int
    model: str
    records: int
    deadline_s: float = 60.0
    warmup_s: float = 5.0
    max_duration_s: float = 120.0
    reference_tps: float | None = None  # the Kotlin reference design's published figure


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    runs: tuple[RunSpec, ...]


SCENARIOS: dict[str, Scenario] = {
    s.name: s for s in (
        Scenario(
            "reference",
            "The reference design's benchmark: seed model (90% of calls 200 ms, 10% 1 s), "
            "batch and at-least-once at N = 10 and 50.",
            (
                RunSpec("batch", 10, "seed", 300, reference_tps=9.4),
                RunSpec("batch", 50, "seed", 1_500, reference_tps=46.0),
                RunSpec("at-least-once", 10, "seed", 1_000, reference_tps=34.0),
                RunSpec("at-least-once", 50, "seed", 5_000, reference_tps=170.0),
            ),
        ),
        Scenario(
            "timeout-storm",
            "5% of calls hang past the 60 s deadline (seed+hang:0.05); the counterparty's SLA "
            "is 200 TPS. At-least-once at N = 1000 against batch at N = 50. Warm-up covers the "
            "first deadline; after it, hung calls time out in waves one deadline apart, so the "
            "steady state is averaged over several deadlines.",
            (
                # The window fills with hung calls within seconds, then frees in waves one
                # deadline apart: the backlog must outlast several deadlines, and the
                # measurement must average over them.
                RunSpec("at-least-once", 1000, "seed+hang:0.05", 120_000, warmup_s=70.0,
                        max_duration_s=300.0),
                RunSpec("batch", 50, "seed+hang:0.05", 3_000, warmup_s=10.0,
                        max_duration_s=150.0),
            ),
        ),
        Scenario(
            "scale",
            "At-least-once with the seed model at N = 200, 1000 and 2000: does throughput keep "
            "following Little's law as the window grows?",
            (
                RunSpec("at-least-once", 200, "seed", 20_000, max_duration_s=60.0),
                RunSpec("at-least-once", 1000, "seed", 60_000, max_duration_s=60.0),
                RunSpec("at-least-once", 2000, "seed", 90_000, max_duration_s=60.0),
            ),
        ),
        Scenario(
            "tiny",
            "A few seconds per mode; used by the harness's own test.",
            (
                RunSpec("batch", 10, "fixed:100", 400, warmup_s=0.5, max_duration_s=30.0),
                RunSpec("at-least-once", 10, "fixed:100", 400, warmup_s=0.5,
                        max_duration_s=30.0),
            ),
        ),
    )
}


def get_scenario(name: str) -> Scenario:
    try:
        return SCENARIOS[name]
    except KeyError:
        raise ConfigError(f"unknown scenario {name!r}; choose one of: "
                          f"{', '.join(SCENARIOS)}") from None
