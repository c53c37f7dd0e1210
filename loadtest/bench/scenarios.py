"""The load-test scenarios: which modes, windows and latency models run, with how many records.

Record counts give each run at least ~20 s of steady state after its warm-up at the throughput
it can reach (the Little's-law bound for at-least-once, about N / slowest call for batch);
`max_duration_s` caps runs that cannot finish (batch under a timeout storm).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from dispatcher.errors import ConfigError
from loadtest.harness.topics import INPUT_PARTITIONS

AUTO = "auto"
BARE = "bare"  # the overhead baseline's mode: `waitline loadtest bare`, not the pod
BARE_WAIT = "bare-wait"  # the protocol floor: `waitline loadtest bare --wait-topic …`
# The same two loops on the pod's event loop (uvloop) and garbage-collector thresholds instead of
# asyncio's loop and Python's thresholds: what is left between them and the pod is the engine.
TUNED = "-tuned"
BARE_TUNED, BARE_WAIT_TUNED = BARE + TUNED, BARE_WAIT + TUNED
BASELINES = (BARE, BARE_WAIT, BARE_TUNED, BARE_WAIT_TUNED)
# Peers (the peers extra): `waitline loadtest peer pyrallel-consumer | prosody-events`
PYRALLEL = "pyrallel-consumer"
PROSODY = "prosody-events"  # its state in Cassandra: `waitline dev up --cassandra`
PEERS = (PYRALLEL, PROSODY)
# Records a run is given are sized by its bound, but a pod on this machine finishes at most
# about this many a second: more would only lengthen the topic's production.
MACHINE_TPS = 2_500.0


@dataclass(frozen=True)
class RunSpec:
    mode: str  # "batch" | "at-least-once" | "bare" | "bare-wait" (the baseline loops) | a peer
    concurrency: int | str  # a window N, or "auto"
    model: str
    records: int
    deadline_s: float = 60.0
    warmup_s: float = 5.0
    max_duration_s: float = 120.0
    reference_tps: float | None = None  # the Kotlin reference design's published figure
    partitions: int = INPUT_PARTITIONS
    ordering: str = "unordered"
    rate_limit: str | None = None
    max_concurrency: int = 5000  # with concurrency "auto"
    keys: int | None = None  # distinct record keys; None: every record its own
    workers: int = 1  # the pod's --workers (the window N is the pod's, shared among them)
    loop_lag_target: str | None = None  # the pod's --loop-lag-target; None: its default

    def pod_flags(self) -> list[str]:
        """The `waitline dispatch` flags this run adds to the harness's own."""
        flags = ["--mode", self.mode, "--concurrency", str(self.concurrency),
                 "--ordering", self.ordering]
        if self.concurrency == AUTO:
            flags += ["--max-concurrency", str(self.max_concurrency)]
        if self.rate_limit is not None:
            flags += ["--rate-limit", self.rate_limit]
        if self.workers > 1:
            flags += ["--workers", str(self.workers)]
        if self.loop_lag_target is not None:
            flags += ["--loop-lag-target", self.loop_lag_target]
        return flags


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
            "At-least-once with the seed model at N = 200, 1000, 2000 and 5000: does throughput "
            "keep following Little's law as the window grows, and hold once one event loop "
            "binds?",
            (
                RunSpec("at-least-once", 200, "seed", 20_000, max_duration_s=60.0),
                RunSpec("at-least-once", 1000, "seed", 60_000, max_duration_s=60.0),
                # About a minute at the machine's ~2,500 TPS: a window of thousands fills
                # in waves that take a while to even out (90,000 records gave 0.82-1.00).
                RunSpec("at-least-once", 2000, "seed", 120_000, max_duration_s=90.0),
                RunSpec("at-least-once", 5000, "seed", 150_000, max_duration_s=90.0),
            ),
        ),
        Scenario(
            "adaptive",
            "A counterparty that serves 50 calls at a time (seed+capacity:50: slower past 50 in "
            "flight, 503 past 100): fixed N = 25, 50, 100 and 200 beside --concurrency auto, "
            "untuned. Bound: min(N, 50) / 0.28 s.",
            (
                RunSpec("at-least-once", 25, "seed+capacity:50", 3_000, max_duration_s=60.0),
                RunSpec("at-least-once", 50, "seed+capacity:50", 5_000, max_duration_s=60.0),
                RunSpec("at-least-once", 100, "seed+capacity:50", 5_000, max_duration_s=60.0),
                RunSpec("at-least-once", 200, "seed+capacity:50", 5_000, max_duration_s=60.0),
                RunSpec("at-least-once", AUTO, "seed+capacity:50", 6_000, warmup_s=10.0,
                        max_duration_s=90.0),
            ),
        ),
        Scenario(
            "auto-reference",
            "--concurrency auto against the reference model (seed, no capacity limit): the "
            "window should climb until the pod's CPU binds, and hold there.",
            (
                RunSpec("at-least-once", AUTO, "seed", 120_000, warmup_s=20.0,
                        max_duration_s=80.0),
            ),
        ),
        Scenario(
            "overhead",
            "CPU per record of the pod against the least a consume -> POST loop costs "
            "(`waitline loadtest bare`: no wait topic, no retries, offsets auto-committed), and "
            "against the protocol floor (bare-wait: the same loop writing each record's "
            "acknowledged wait record and tombstone around its POST, no engine), on the same "
            "mock (fixed:100) at N = 100 and 1000, one after the other.",
            (
                RunSpec(BARE, 100, "fixed:100", 30_000, max_duration_s=60.0),
                RunSpec(BARE_WAIT, 100, "fixed:100", 30_000, max_duration_s=60.0),
                RunSpec("at-least-once", 100, "fixed:100", 30_000, max_duration_s=60.0),
                RunSpec(BARE, 1000, "fixed:100", 60_000, max_duration_s=60.0),
                RunSpec(BARE_WAIT, 1000, "fixed:100", 60_000, max_duration_s=60.0),
                RunSpec("at-least-once", 1000, "fixed:100", 60_000, max_duration_s=60.0),
            ),
        ),
        Scenario(
            "peers",
            "The pod beside the bare loop, the protocol floor (bare-wait), both also on the "
            "pod's event loop and collector thresholds (-tuned), pyrallel-consumer (asyncio, "
            "unordered, max_in_flight = N, its own at-least-once commits, a DLQ after 3 "
            "attempts; Python 3.12 or later) and prosody-events (its pipeline mode, "
            "max_concurrency = N, its state in Cassandra: waitline dev up --cassandra), both "
            "from the peers extra, on the same mock (fixed:100) at N = 100 and 1000, one after "
            "the other; with --rounds, the order alternates and the peer table gives medians.",
            tuple(RunSpec(mode, n, "fixed:100", records, max_duration_s=60.0)
                  for n, records in ((100, 30_000), (1000, 60_000))
                  for mode in (BARE, BARE_TUNED, BARE_WAIT, BARE_WAIT_TUNED, "at-least-once",
                               PYRALLEL, PROSODY)),
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


def custom_scenario(*, concurrency: str, model: str, duration_s: float, mode: str,
                    partitions: int, ordering: str, rate_limit: str | None,
                    max_concurrency: int, keys: int | None = None,
                    workers: int = 1, loop_lag_target: str | None = None) -> Scenario:
    """A scenario from `compare`'s free parameters: one run per window in `concurrency`
    (comma-separated numbers and `auto`), each given records for about `duration_s` of steady
    state at its bound (capped at what this machine can finish)."""
    from loadtest.mock.latency import parse_model  # noqa: PLC0415 - keeps this module light

    latency = parse_model(model)
    windows: list[int | str] = []
    for item in (part.strip().lower() for part in concurrency.split(",")):
        if item == AUTO:
            windows.append(AUTO)
        elif item.isdigit() and int(item) >= 1:
            windows.append(int(item))
        else:
            raise ConfigError(f"--concurrency: {item!r} is neither a window (a whole number "
                              "≥ 1) nor auto; e.g. 10,50,200,auto")
    if duration_s <= 0 or partitions < 1 or (keys is not None and keys < 1) or workers < 1:
        raise ConfigError("--duration must be positive, --partitions, --keys and --workers at "
                          "least 1")
    from dispatcher.flow.ordering import OrderingMode  # noqa: PLC0415
    from dispatcher.pod.settings import Mode  # noqa: PLC0415

    modes, orderings = [*Mode, *BASELINES, *PEERS], list(OrderingMode)
    if mode not in modes or ordering not in orderings:
        raise ConfigError(f"--mode {mode!r} / --ordering {ordering!r}: choose {_either(modes)} "
                          f"(the baseline loops and peers), and {_either(orderings)}")
    if AUTO in windows and mode != "at-least-once":
        raise ConfigError(f"--concurrency auto adapts the at-least-once window, not {mode} mode")
    runs = []
    for window in windows:
        largest = max_concurrency if window == AUTO else int(window)
        tps = min(MACHINE_TPS, latency.bound_tps(largest, 60.0))
        if rate_limit is not None:
            from dispatcher.flow.rate import parse_rate_limit  # noqa: PLC0415

            tps = min(tps, parse_rate_limit(rate_limit).per_s)
        warmup_s = 10.0 if window == AUTO else 5.0  # auto first grows its window
        runs.append(RunSpec(mode, window, model, max(100, int(tps * (duration_s + warmup_s))),
                            warmup_s=warmup_s, max_duration_s=2 * duration_s + 30,
                            partitions=partitions, ordering=ordering, rate_limit=rate_limit,
                            max_concurrency=max_concurrency, keys=keys, workers=workers,
                            loop_lag_target=loop_lag_target))
    pods = f", {workers} workers" if workers > 1 else ""
    return Scenario("custom", f"{mode}, N = {concurrency}, model {model}{pods}", tuple(runs))


def _either(choices: Sequence[str]) -> str:
    """"a, b or c"."""
    return f"{', '.join(choices[:-1])} or {choices[-1]}"


def get_scenario(name: str) -> Scenario:
    try:
        return SCENARIOS[name]
    except KeyError:
        raise ConfigError(f"unknown scenario {name!r}; choose one of: "
                          f"{', '.join(SCENARIOS)}") from None
