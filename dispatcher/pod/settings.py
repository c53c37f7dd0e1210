"""The pod's configuration: every `waitline dispatch` flag, also read as a `WAITLINE_*` variable.

`DispatchSettings` is the flat, validated view (flags > environment > defaults, via
pydantic-settings), on top of the Kafka client settings every command reads
(`dispatcher.kafka.config.KafkaClientSettings`); the engine takes the grouped, frozen views it
builds once: `KafkaConfig`, `TopicConfig`, `WindowConfig`, `ObservabilityConfig`, and the
`--counterparty-url` preset's `HttpHandlerConfig`. Invalid values raise `ConfigError` with one
line per problem, naming the flag.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import (
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_settings import SettingsConfigDict

from dispatcher.durations import as_field_error, duration_s
from dispatcher.errors import ConfigError, one_line_or_list
from dispatcher.flow.adaptive import AdaptiveConfig
from dispatcher.flow.breaker import BreakerConfig, parse_breaker
from dispatcher.flow.loopguard import DEFAULT_TARGET_LAG_S, LoopGuardConfig
from dispatcher.flow.ordering import OrderingMode
from dispatcher.flow.rate import RateLimit, parse_rate_limit
from dispatcher.handlers.http_config import HttpHandlerConfig, counterparty_url_preset
from dispatcher.kafka.config import KafkaClientSettings
from dispatcher.kafka.topics import DEFAULT_DELETE_RETENTION_S, TopicConfig
from dispatcher.logs import LogFormat
from dispatcher.pod.collector import DEFAULT_GC_THRESHOLDS, Thresholds, parse_gc_thresholds
from dispatcher.secret_settings import SecretUrl

MAX_CONCURRENCY = 100_000
DEFAULT_REBALANCE_TIMEOUT_S = 60.0
MAX_WORKERS = 64


class Mode(enum.StrEnum):
    AT_LEAST_ONCE = "at-least-once"
    BATCH = "batch"


class EventLoop(enum.StrEnum):
    AUTO = "auto"  # uvloop when installed, else asyncio's own
    ASYNCIO = "asyncio"
    UVLOOP = "uvloop"


@dataclass(frozen=True)
class WindowConfig:
    mode: Mode
    concurrency: int  # the window N; with `adaptive`, its upper bound
    wait_expiration_s: float
    commit_interval_s: float
    drain_grace_s: float
    rebalance_timeout_s: float = 60.0
    stall_warning_s: float = 60.0
    ordering: OrderingMode = OrderingMode.UNORDERED
    adaptive: AdaptiveConfig | None = None  # --concurrency auto
    deadline_s: float = 60.0  # a call's deadline, retries included
    loop_guard: LoopGuardConfig | None = None  # --loop-lag-target; None: never capped

    @property
    def refresh_wait_record_s(self) -> float:
        """How long a prepared record waits for a call slot before its wait record is written
        again: half of what the expiration leaves beyond the call's deadline."""
        return (self.wait_expiration_s - self.deadline_s) / 2

    @property
    def revoke_wait_s(self) -> float:
        """How long a revoke waits for prepares: half the rebalance timeout, so the commit and
        the rejoin fit in the other half and the member is not kicked from its group."""
        return self.rebalance_timeout_s / 2


@dataclass(frozen=True)
class ObservabilityConfig:
    metrics_host: str
    metrics_port: int | None
    log_format: LogFormat
    log_level: str


class DispatchSettings(KafkaClientSettings):
    """Flat settings, one field per flag; `WAITLINE_<FIELD>` in the environment."""

    model_config = SettingsConfigDict(env_prefix="WAITLINE_", extra="forbid", frozen=True)

    input_topic: str = Field(description="topic(s) to consume, comma-separated")
    group: str
    counterparty_url: SecretUrl | None = None
    handler: str | None = None
    mode: Mode = Mode.AT_LEAST_ONCE
    concurrency: int | Literal["auto"] = 100
    min_concurrency: int = Field(10, ge=1, le=MAX_CONCURRENCY)
    max_concurrency: int = Field(5000, ge=1, le=MAX_CONCURRENCY)
    deadline: float = 60.0
    wait_expiration: float = 3600.0
    commit_interval: float = 1.0
    drain_grace: float = 30.0
    rebalance_timeout: float | None = None  # see `rebalance_timeout_s`
    stall_warning: float = 60.0
    loop_lag_target: float = DEFAULT_TARGET_LAG_S
    rate_limit: str | None = None
    circuit_breaker: str = "on"
    ordering: OrderingMode = OrderingMode.UNORDERED
    wait_topic: str | None = None
    dlq_topic: str | None = None
    result_topic: str | None = None
    create_topics: bool | None = None
    delete_retention: float = float(DEFAULT_DELETE_RETENTION_S)
    metrics_host: str = "127.0.0.1"
    metrics_port: int | None = Field(None, ge=0, le=65535)
    log_format: LogFormat = LogFormat.CONSOLE
    log_level: str = "INFO"
    event_loop: EventLoop = EventLoop.AUTO
    gc_thresholds: str = DEFAULT_GC_THRESHOLDS
    workers: int = Field(1, ge=1, le=MAX_WORKERS)

    def collector(self) -> Thresholds | None:
        """The garbage collector's thresholds for the pod, None to keep Python's."""
        return parse_gc_thresholds(self.gc_thresholds)

    @field_validator("deadline", "wait_expiration", "commit_interval", "drain_grace",
                     "delete_retention", "rebalance_timeout", "stall_warning", mode="before")
    @classmethod
    def _parse_duration(cls, value: Any) -> float | None:
        if value is None:  # --rebalance-timeout not given: its default depends on --ordering
            return None
        seconds = duration_s(value)
        if seconds <= 0:
            raise ValueError("must be a positive duration")
        return seconds

    @field_validator("loop_lag_target", mode="before")
    @classmethod
    def _parse_lag_target(cls, value: Any) -> float:
        seconds = duration_s(value)
        if seconds < 0:
            raise ValueError("must be a duration, or 0 for no loop guard")
        return seconds

    def loop_guard(self) -> LoopGuardConfig | None:
        """The loop guard (`--loop-lag-target`), None when it is 0 or in batch mode."""
        if self.mode is Mode.BATCH or self.loop_lag_target == 0:
            return None
        return LoopGuardConfig(target_lag_s=self.loop_lag_target)

    @model_validator(mode="after")
    def _expiration_outlives_deadline(self) -> DispatchSettings:
        if self.wait_expiration <= self.deadline:
            raise ValueError(
                f"--wait-expiration ({self.wait_expiration:g} s) must exceed --deadline "
                f"({self.deadline:g} s): a wait record that expires while its call can still "
                "succeed would be sent to the DLQ by the reconciliation job as well"
            )
        if not self.input_topics():
            raise ValueError("--input-topic names no topic")
        if (self.handler is None) == (self.counterparty_url is None):
            raise ValueError(
                "give --counterparty-url (the built-in HTTP handler POSTs each value there) or "
                "--handler package.module:attribute (your own async function), not both"
                if self.handler else
                "give --counterparty-url (the built-in HTTP handler) or --handler "
                "package.module:attribute (your own async function)"
            )
        rebalance = self.rebalance_timeout_s
        if rebalance < 2 * self.commit_interval or rebalance < 2:
            raise ValueError(
                f"--rebalance-timeout ({rebalance:g} s) must be at least 2 s and "
                f"twice --commit-interval ({self.commit_interval:g} s): a revoke waits half of "
                "it for prepares, then commits"
            )
        if self.ordering is not OrderingMode.UNORDERED and rebalance <= 2 * self.deadline:
            raise ValueError(
                f"--rebalance-timeout ({rebalance:g} s) must exceed twice --deadline "
                f"({self.deadline:g} s) under --ordering {self.ordering}: a revoke waits at "
                "most half of it for the calls in flight, so that the next owner never calls a "
                "key while this pod still does"
            )
        return self

    @property
    def rebalance_timeout_s(self) -> float:
        """--rebalance-timeout; by default 60 s, or under --ordering twice the deadline and
        30 s more (a revoke must be able to wait out a call in flight in half of it)."""
        if self.rebalance_timeout is not None:
            return self.rebalance_timeout
        if self.ordering is OrderingMode.UNORDERED:
            return DEFAULT_REBALANCE_TIMEOUT_S
        return max(DEFAULT_REBALANCE_TIMEOUT_S, 2 * self.deadline + 30)

    @field_validator("concurrency", mode="before")
    @classmethod
    def _valid_concurrency(cls, value: Any) -> Any:
        text = str(value).strip().lower()
        if text == "auto":
            return "auto"
        if not text.isdigit() or not 1 <= int(text) <= MAX_CONCURRENCY:
            raise ValueError(f"must be a whole number from 1 to {MAX_CONCURRENCY:,}, or auto "
                             f"(not {value!r})")
        return int(text)

    @model_validator(mode="after")
    def _workers_fit_the_window(self) -> DispatchSettings:
        if self.workers > self.window_size:
            flag = "--max-concurrency" if self.concurrency == "auto" else "--concurrency"
            raise ValueError(f"--workers ({self.workers}) exceeds the window ({flag} "
                             f"{self.window_size}): each worker needs a call slot of its own")
        return self

    @model_validator(mode="after")
    def _valid_adaptive_bounds(self) -> DispatchSettings:
        if self.concurrency == "auto":
            if self.mode is Mode.BATCH:
                raise ValueError("--concurrency auto adapts the at-least-once window; batch mode "
                                 "takes a fixed batch size")
            as_field_error(self.adaptive)
        return self

    def adaptive(self) -> AdaptiveConfig | None:
        """The `--concurrency auto` bounds, None for a fixed window."""
        if self.concurrency != "auto":
            return None
        return AdaptiveConfig(min_limit=self.min_concurrency, max_limit=self.max_concurrency)

    @property
    def window_size(self) -> int:
        """The window N, or the most `--concurrency auto` may grow it to."""
        return self.max_concurrency if self.concurrency == "auto" else self.concurrency

    @field_validator("rate_limit")
    @classmethod
    def _valid_rate_limit(cls, value: str | None) -> str | None:
        if value is not None:
            as_field_error(lambda: parse_rate_limit(value))
        return value

    @field_validator("circuit_breaker", "gc_thresholds")
    @classmethod
    def _parses(cls, value: str, info: ValidationInfo) -> str:
        parse = {"circuit_breaker": parse_breaker, "gc_thresholds": parse_gc_thresholds}
        as_field_error(lambda: parse[str(info.field_name)](value))
        return value

    def breaker(self) -> BreakerConfig | None:
        """The parsed `--circuit-breaker` (at-least-once mode only), None when it is off."""
        return None if self.mode is Mode.BATCH else parse_breaker(self.circuit_breaker)

    def rate(self) -> RateLimit | None:
        """The parsed `--rate-limit`, None when there is none."""
        return None if self.rate_limit is None else parse_rate_limit(self.rate_limit)

    def input_topics(self) -> tuple[str, ...]:
        return tuple(t.strip() for t in self.input_topic.split(",") if t.strip())

    def topics(self, *, local_stack: bool) -> TopicConfig:
        """Topic names default from the group; creation defaults on against the local stack."""
        return TopicConfig(
            input_topics=self.input_topics(),
            group=self.group,
            wait_topic=self.wait_topic or f"{self.group}.wait",
            dlq_topic=self.dlq_topic or f"{self.group}.dlq",
            result_topic=self.result_topic,
            create_missing=local_stack if self.create_topics is None else self.create_topics,
            delete_retention_s=self.delete_retention,
        )

    def window(self) -> WindowConfig:
        return WindowConfig(mode=self.mode, concurrency=self.window_size,
                            wait_expiration_s=self.wait_expiration,
                            commit_interval_s=self.commit_interval,
                            drain_grace_s=self.drain_grace,
                            rebalance_timeout_s=self.rebalance_timeout_s,
                            stall_warning_s=self.stall_warning,
                            ordering=self.ordering, adaptive=self.adaptive(),
                            deadline_s=self.deadline, loop_guard=self.loop_guard())

    def counterparty(self) -> HttpHandlerConfig:
        """The built-in HTTP handler preset `--counterparty-url` runs (only without --handler):
        POST to the URL, one connection per window slot, the JSON call summary as result."""
        if self.counterparty_url is None:
            raise ConfigError("no --counterparty-url: this pod runs --handler")
        return counterparty_url_preset(self.counterparty_url, max_connections=self.window_size)

    def observability(self) -> ObservabilityConfig:
        return ObservabilityConfig(metrics_host=self.metrics_host, metrics_port=self.metrics_port,
                                   log_format=self.log_format, log_level=self.log_level.upper())


def load_settings(**flags: Any) -> DispatchSettings:
    """Settings from the given flags (None = not given) over the environment; ConfigError on
    invalid input, listing every problem with the flag it concerns."""
    given = {name: value for name, value in flags.items() if value is not None}
    try:
        return DispatchSettings(**given)
    except ValidationError as exc:
        problems = []
        for error in exc.errors():
            field = ".".join(str(part) for part in error["loc"])
            message = str(error["msg"]).removeprefix("Value error, ")
            # A check across fields has no location; its message names the flags itself.
            problems.append(f"--{field.replace('_', '-')} (or WAITLINE_{field.upper()}): "
                            f"{message}" if field else message)
        raise ConfigError(one_line_or_list("invalid configuration", problems)) from exc
