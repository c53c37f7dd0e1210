"""Prometheus metrics of one dispatcher, and the HTTP endpoint that serves them with health.

`/metrics` (Prometheus text), `/healthz` (the event loop answers) and `/readyz` (the engine has
joined its group and holds partitions, or is running with nothing to do yet; not after a fatal
error) on one port. `/readyz` also shows each partition's oldest pending record and commit
stall, and the fatal error if there was one. `/status` is the pod's status document for the
console's pods view (`dispatcher/pod/status.py`: window, records by state, stalled records,
breaker, rate limit; read-only, no payloads, no secrets).
Each `DispatcherMetrics` has its own registry, so tests can run several engines in one process.

The series a record updates on its path (records fetched and prepared, the two latency
histograms) are `LoopCounter` and `LoopHistogram`: only the pod's event loop writes them, and
`/metrics` is served on that same loop, so they take no lock (prometheus-client's metrics take
one on every update); `waitline_in_flight` is read from the window when served.
"""

from __future__ import annotations

import contextlib
import time
from bisect import bisect_left
from collections.abc import Callable, Iterable, Sequence

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.metrics_core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.utils import floatToGoString

from dispatcher.pod.stalls import PartitionStall

LATENCY_BUCKETS_S = (0.01, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0,
                     60.0, 120.0)

RECORD_BUCKETS_S = (0.05, 0.1, 0.15, 0.2, 0.225, 0.25, 0.3, 0.4, 0.5, 0.75, 1.0, 1.1, 1.25, 1.5,
                    2.0, 3.0, 5.0, 10.0, 20.0, 30.0, 45.0, 60.0, 61.0, 65.0, 75.0, 90.0, 120.0)

_bucket_label: Callable[[float], str] = floatToGoString  # as prometheus-client writes `le`


class LoopCounter:
    """A counter only the pod's event loop adds to (see the module's docstring)."""

    __slots__ = ("_created", "documentation", "name", "value")

    def __init__(self, name: str, documentation: str) -> None:
        self.name = name
        self.documentation = documentation
        self.value = 0.0
        self._created = time.time()

    def inc(self, amount: float = 1.0) -> None:
        if amount < 0:
            raise ValueError(f"a counter only goes up: {self.name} by {amount}")
        self.value += amount

    def family(self) -> Metric:
        return CounterMetricFamily(self.name, self.documentation, value=self.value,
                                   created=self._created)


class LoopHistogram:
    """A histogram only the pod's event loop observes into (see the module's docstring)."""

    __slots__ = ("_bounds", "_created", "counts", "documentation", "name", "sum")

    def __init__(self, name: str, documentation: str, buckets: Sequence[float]) -> None:
        if list(buckets) != sorted(set(buckets)):
            raise ValueError(f"{name}: buckets must be distinct and ascending: {buckets}")
        self.name = name
        self.documentation = documentation
        self._bounds = tuple(buckets)
        self.counts = [0] * (len(self._bounds) + 1)  # the last one: above every bound (+Inf)
        self.sum = 0.0
        self._created = time.time()

    def observe(self, amount: float) -> None:
        self.counts[bisect_left(self._bounds, amount)] += 1  # the first bound >= amount
        self.sum += amount

    def family(self) -> Metric:
        cumulative: list[tuple[str, float]] = []
        total = 0
        for bound, count in zip((*self._bounds, float("inf")), self.counts, strict=True):
            total += count
            cumulative.append((_bucket_label(bound), total))
        family = HistogramMetricFamily(self.name, self.documentation, buckets=cumulative,
                                       sum_value=self.sum)
        family.add_sample(f"{self.name}_created", {}, self._created)  # as prometheus-client's
        return family


class LoopSeries:
    """The registry's collector of a pod's `LoopCounter`s and `LoopHistogram`s."""

    def __init__(self, series: Sequence[LoopCounter | LoopHistogram]) -> None:
        self._series = series

    def collect(self) -> Iterable[Metric]:
        return [one.family() for one in self._series]


class DispatcherMetrics:
    """The pod's counters and gauges; names start with `waitline_`."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.fetched = LoopCounter("waitline_records_fetched",
                                   "Records fetched from input topics.")
        self.prepared = LoopCounter("waitline_records_prepared",
                                    "Records made committable: their call started (after their "
                                    "wait record was acknowledged), or their own DLQ record was.")
        self.outcomes = Counter("waitline_records_finished",
                                "Records finished, by outcome (success, failure class).",
                                ["outcome"], registry=r)
        self.in_flight = Gauge("waitline_in_flight", "Records holding a window slot: fetched "
                               "and not yet finished, less those only writing their tombstone.",
                               registry=r)
        self.window = Gauge("waitline_window", "The window: most calls at once (with "
                            "--concurrency auto, its current size).", registry=r)
        self.window_changes = Counter("waitline_window_changes",
                                      "Changes of the adaptive window, by reason (growth, "
                                      "latency, overload).", ["reason"], registry=r)
        self.latency_floor = Gauge("waitline_latency_floor_seconds",
                                   "The adaptive window's latency floor: the lowest median "
                                   "attempt latency it has seen.", registry=r)
        self.call_latency = LoopHistogram("waitline_counterparty_latency_seconds",
                                          "Counterparty call time, retries included.",
                                          LATENCY_BUCKETS_S)
        self.record_duration = LoopHistogram("waitline_record_duration_seconds",
                                             "Time from fetch until the record is finished "
                                             "(outcome durable; in batch mode, its batch "
                                             "committed).", RECORD_BUCKETS_S)
        r.register(LoopSeries((self.fetched, self.prepared, self.call_latency,
                                self.record_duration)))
        self.commit_lag = Gauge("waitline_committed_offset_lag",
                                "Records between the committed offset and the high watermark, "
                                "summed over assigned partitions.", registry=r)
        self.actuality_lag = Gauge("waitline_actuality_lag_seconds",
                                   "Now minus the timestamp of the oldest record whose offset "
                                   "is not committed yet (0 when caught up).", registry=r)
        self.commits = Counter("waitline_commits", "Offset commits, by result.", ["result"],
                               registry=r)
        self.produce_errors = Counter("waitline_produce_errors",
                                      "Records that could not be written (non-retriable).",
                                      ["topic_role"], registry=r)
        self.circuit_state = Gauge("waitline_circuit_state",
                                   "1 for the circuit breaker's current state (closed, open, "
                                   "half_open), 0 for the others.", ["state"], registry=r)
        self.circuit_transitions = Counter("waitline_circuit_transitions",
                                           "Circuit breaker state changes, by the state entered.",
                                           ["state"], registry=r)
        self.probes_returned = Counter("waitline_circuit_probes_returned",
                                       "Probe records that ran into their deadline while the "
                                       "circuit stayed open and went back to the call line "
                                       "instead of the DLQ (once each).", registry=r)
        self.loop_lag = Gauge("waitline_event_loop_lag_seconds",
                              "How late the event loop fired a timer, mean over the last "
                              "second: past --loop-lag-target the loop guard caps the window.",
                              registry=r)
        self.loop_cap = Gauge("waitline_loop_cap",
                              "The loop guard's cap on calls in flight (the window when the "
                              "loop keeps up; 0 without a guard: --loop-lag-target 0, batch mode).",
                              registry=r)
        # Stuck-record visibility, per assigned partition (a silent stall is what users of
        # other parallel consumers meet most): the oldest record holding back the commit.
        partition = ["topic", "partition"]
        self.oldest_pending_age = Gauge(
            "waitline_partition_oldest_pending_age_seconds",
            "Age (now minus fetch time) of the partition's oldest record whose offset is not "
            "committed yet; 0 when none waits.", partition, registry=r)
        self.oldest_pending_offset = Gauge(
            "waitline_partition_oldest_pending_offset",
            "Offset of the partition's oldest record whose offset is not committed yet "
            "(-1 when none waits).", partition, registry=r)
        self.commit_stall = Gauge(
            "waitline_partition_commit_stall_seconds",
            "Seconds since the partition's committed offset last advanced while records of it "
            "were waiting (0 when it is caught up).", partition, registry=r)

    def set_partition_stall(self, stall: PartitionStall) -> None:
        labels = (stall.topic, str(stall.partition))
        self.oldest_pending_age.labels(*labels).set(stall.oldest_age_s)
        self.oldest_pending_offset.labels(*labels).set(
            -1 if stall.oldest_offset is None else stall.oldest_offset)
        self.commit_stall.labels(*labels).set(stall.stall_s)

    def forget_partition(self, tp: tuple[str, int]) -> None:
        """Drop a revoked partition's series (another pod reports it now)."""
        labels = (tp[0], str(tp[1]))
        for gauge in (self.oldest_pending_age, self.oldest_pending_offset, self.commit_stall):
            with contextlib.suppress(KeyError):
                gauge.remove(*labels)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


class MetricsServer:
    """Serves `/metrics`, `/healthz`, `/readyz` and `/status`; owned by the pod (start/stop)."""

    def __init__(self, metrics: DispatcherMetrics, ready: Callable[[], bool],
                 host: str, port: int, *,
                 details: Callable[[], dict[str, object]] | None = None,
                 status: Callable[[], dict[str, object]] | None = None) -> None:
        self._metrics = metrics
        self._ready = ready
        self._details = details or dict
        self._status = status or dict
        self._host = host
        self._port = port
        self._runner: web.AppRunner | None = None
        self.bound_port: int | None = None

    async def _metrics_handler(self, _request: web.Request) -> web.Response:
        return web.Response(body=self._metrics.exposition(),
                            headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def _health(self, _request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def _readiness(self, _request: web.Request) -> web.Response:
        details = self._details()
        if self._ready():
            return web.json_response({"status": "ready", **details})
        return web.json_response({"status": "not ready", **details}, status=503)

    async def _status_handler(self, _request: web.Request) -> web.Response:
        return web.json_response(self._status())

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/metrics", self._metrics_handler)
        app.router.add_get("/healthz", self._health)
        app.router.add_get("/readyz", self._readiness)
        app.router.add_get("/status", self._status_handler)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self._host, self._port)
        await site.start()
        server = site._server
        sockets = getattr(server, "sockets", None) or []
        self.bound_port = int(sockets[0].getsockname()[1]) if sockets else self._port

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
