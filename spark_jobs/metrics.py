"""Prometheus metrics of the reconciliation job, served on `--metrics-port` (off by default).

Names start with `waitline_reconcile_`. The mirror's counters and lag are updated per
micro-batch, the row counts per state after each cycle (the same query as `waitline registry
stats`), and the end time of the last cycle, so a job stuck on an unreachable PostgreSQL shows
as a cycle that stopped ending. Each `ReconcileMetrics` has its own registry, so tests can run
several jobs in one process.
"""

from __future__ import annotations

from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

from connectors.registry import TopicStats
from connectors.sink import MirrorResult

# MirrorResult's fields
_CHANGES = ("upserted", "deleted", "rejected", "non_derived", "withdrawn")


class ReconcileMetrics:
    """The job's counters and gauges for one wait topic."""

    def __init__(self, wait_topic: str) -> None:
        self.registry = CollectorRegistry()
        self._wait_topic = wait_topic
        labels = ["wait_topic"]
        self.events = Counter(
            "waitline_reconcile_events", "Wait-topic records the mirror applied to the registry.",
            labels, registry=self.registry)
        self.changes = Counter(
            "waitline_reconcile_changes",
            "Registry changes by kind: upserted, deleted, rejected (unparseable, see wait_reject),"
            " non_derived (wait ids not derived from the group: reference-format records),"
            " withdrawn (rows a pod withdrew after its revoke gave up on their prepare).",
            [*labels, "change"], registry=self.registry)
        self.mirror_lag = Gauge(
            "waitline_reconcile_mirror_lag_seconds",
            "Age of the newest wait record when its micro-batch was applied; 0 after a cycle "
            "that found nothing new.", labels, registry=self.registry)
        self.waits = Gauge(
            "waitline_reconcile_waits",
            "Registry rows by state after the last cycle: open (expired ones included), "
            "expired_unsent, sent_awaiting_tombstone, parked (Kafka refused the DLQ record), "
            "rejected.", [*labels, "state"], registry=self.registry)
        self.non_derived_rows = Gauge(
            "waitline_reconcile_waits_non_derived",
            "Registry rows (any state) after the last cycle whose wait id is not derived from "
            "the group and coordinates (reference-format records).", labels,
            registry=self.registry)
        self.expired = Counter(
            "waitline_reconcile_expired",
            "Expired waits the sweep handled, by outcome: sent (DLQ record and tombstone "
            "written) or parked.", [*labels, "outcome"], registry=self.registry)
        self.registry_unavailable = Counter(
            "waitline_reconcile_registry_unavailable",
            "Attempts that failed because PostgreSQL was unreachable (each is retried).",
            labels, registry=self.registry)
        self.dlq_indexed = Counter(
            "waitline_reconcile_dlq_indexed",
            "DLQ records the job applied to the DLQ index (dlq_record), by DLQ topic.",
            [*labels, "dlq_topic"], registry=self.registry)
        self.dlq_index_lag = Gauge(
            "waitline_reconcile_dlq_index_lag_seconds",
            "Age of the newest DLQ record when its micro-batch was indexed; 0 after a cycle "
            "that found nothing new.", [*labels, "dlq_topic"], registry=self.registry)
        self.cycle_end = Gauge(
            "waitline_reconcile_last_cycle_end_timestamp_seconds",
            "Unix time the last cycle (mirror, then expiry) ended.", labels,
            registry=self.registry)
        # Every series exists from the start at 0, so rate() and increase() see its first rise.
        for counter in (self.events, self.registry_unavailable):
            counter.labels(wait_topic)
        for change in _CHANGES:
            self.changes.labels(wait_topic, change)
        for outcome in ("sent", "parked"):
            self.expired.labels(wait_topic, outcome)
        self._server: WSGIServer | None = None

    def batch_applied(self, events_in: int, result: MirrorResult, lag_s: float | None) -> None:
        topic = self._wait_topic
        self.events.labels(topic).inc(events_in)
        for change in _CHANGES:
            self.changes.labels(topic, change).inc(getattr(result, change))
        if lag_s is not None:
            self.mirror_lag.labels(topic).set(max(lag_s, 0.0))

    def dlq_batch_indexed(self, dlq_topic: str, records: int, lag_s: float | None) -> None:
        self.dlq_indexed.labels(self._wait_topic, dlq_topic).inc(records)
        if lag_s is not None:
            self.dlq_index_lag.labels(self._wait_topic, dlq_topic).set(max(lag_s, 0.0))

    def swept(self, sent: int, parked: int) -> None:
        self.expired.labels(self._wait_topic, "sent").inc(sent)
        self.expired.labels(self._wait_topic, "parked").inc(parked)

    def cycle_ended(self, mirrored_any: bool, stats: TopicStats | None) -> None:
        """Stamp the cycle's end; without new records the mirror is caught up (lag 0).
        `stats` None: they could not be read, the row gauges keep their last values."""
        topic = self._wait_topic
        if not mirrored_any:
            self.mirror_lag.labels(topic).set(0.0)
        if stats is not None:
            for state, count in (("open", stats.open_total),
                                 ("expired_unsent", stats.expired_unsent),
                                 ("sent_awaiting_tombstone", stats.sent_awaiting_tombstone),
                                 ("parked", stats.parked), ("rejected", stats.rejected)):
                self.waits.labels(topic, state).set(count)
            self.non_derived_rows.labels(topic).set(stats.non_derived)
        self.cycle_end.labels(topic).set_to_current_time()

    def serve(self, host: str, port: int) -> None:
        """Serve `/metrics` from a daemon thread until `close`."""
        self._server, _thread = start_http_server(port, host, registry=self.registry)

    @property
    def port(self) -> int | None:
        return None if self._server is None else self._server.server_port

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
