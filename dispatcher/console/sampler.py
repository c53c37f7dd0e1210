"""The console's watch on its dispatcher groups: one owned task that, every sampling interval,
reads each group from Kafka (`groups.py`) and asks every pod's status endpoint
(`pod_status.py`), and keeps what it learnt in memory: the last snapshot of each group, the
pods' last-seen times (`PodRoster`) and an hour of lag per partition (`LagHistory`). A page
that needs the pods samples at once if the last sample is older than a few seconds (callers at
the same moment share one sample).

Settings, from `WAITLINE_CONSOLE_*` variables:
- `POD_STATUS_URLS`: the pods' status endpoints, comma-separated (`http://10.0.0.5:9100`, a
  pod's metrics port, or the full `…/status` URL); a URL may carry a credential (a proxy's
  basic auth in its userinfo, a token in its query), so each registers for masking
  (`SecretUrls`) and the list may come from a mounted file, `POD_STATUS_URLS_FILE`;
- `POD_STATUS_DNS`: `NAME:PORT`, a name that resolves to every pod (the chart's headless
  Service of the pods' metrics port); resolved again at every sample;
- `SAMPLE_INTERVAL_S` (30): how often; `POD_TIMEOUT_S` (2): how long a pod may take to answer;
  `POD_FORGET_S` (900): how long a pod that left the DNS name is still asked (and shown).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Annotated

from pydantic import Field, ValidationError, field_validator
from pydantic_settings import SettingsConfigDict

from dispatcher.console.groups import GroupReader
from dispatcher.console.lag_history import LagHistory, lag_chart
from dispatcher.console.pod_status import PodStatusReader, dns_target, status_url
from dispatcher.console.pods import GroupSnapshot, GroupView, QuietPod, group_view, quiet_pods
from dispatcher.console.settings import ENV_PREFIX
from dispatcher.errors import ConfigError, WaitlineError, config_error
from dispatcher.kafka.config import KafkaConfig
from dispatcher.secret_settings import SecretUrls, WaitlineSettings

log = logging.getLogger(__name__)

FRESH_S = 5.0  # a page asking for the pods samples again when the last sample is older


class WatchSettings(WaitlineSettings):
    """Where the pods' status endpoints are, and how often the console samples the groups."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore", frozen=True,
                                      hide_input_in_errors=True)

    pod_status_urls: SecretUrls = ""
    pod_status_dns: str = ""
    sample_interval_s: Annotated[float, Field(ge=1)] = 30.0
    pod_timeout_s: Annotated[float, Field(gt=0, le=60)] = 2.0
    pod_forget_s: Annotated[float, Field(gt=0)] = 900.0

    @field_validator("pod_status_urls")
    @classmethod
    def _urls(cls, value: str) -> str:
        for url in value.split(","):
            if url.strip():
                _checked(status_url, url)
        return value

    @field_validator("pod_status_dns")
    @classmethod
    def _dns(cls, value: str) -> str:
        if value.strip():
            _checked(dns_target, value)
        return value

    @property
    def urls(self) -> list[str]:
        return [url.strip() for url in self.pod_status_urls.split(",") if url.strip()]

    @property
    def dns(self) -> tuple[str, int] | None:
        return dns_target(self.pod_status_dns) if self.pod_status_dns.strip() else None


def _checked(check: Callable[[str], object], value: str) -> None:
    try:
        check(value)
    except ConfigError as exc:
        raise ValueError(str(exc)) from None


def load_watch_settings(**overrides: object) -> WatchSettings:
    """The settings from the environment and `overrides`; ConfigError naming each problem."""
    try:
        return WatchSettings(**overrides)  # type: ignore[arg-type]
    except ValidationError as exc:
        raise config_error(exc, "console", ENV_PREFIX) from None


def _ended(task: asyncio.Task[None]) -> None:
    """A sampler that stops on its own is a bug: say so (pages then sample when asked)."""
    if not task.cancelled() and (exc := task.exception()) is not None:
        log.error("console: the sampler stopped: %r; pages sample when they are asked", exc)


class Sampler:
    """Samples the groups and their pods every interval (`start`/`stop`; one task)."""

    def __init__(self, kafka: KafkaConfig, groups: list[str], settings: WatchSettings) -> None:
        self.settings = settings
        self.groups = groups
        self.history = LagHistory(settings.sample_interval_s)
        self.pods = PodStatusReader(settings.urls, settings.dns,
                                    timeout_s=settings.pod_timeout_s,
                                    forget_s=settings.pod_forget_s)
        self._reader = GroupReader(kafka)
        self.snapshots: list[GroupSnapshot] = []
        self.kafka_error: str | None = None
        self.sampled_at: float | None = None  # monotonic
        self._lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._loop(), name="waitline-console-sampler")
            self._task.add_done_callback(_ended)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        await self._reader.close()
        await self.pods.close()

    async def _loop(self) -> None:
        while True:
            await self.sample()
            await asyncio.sleep(self.settings.sample_interval_s)

    async def fresh(self, max_age_s: float = FRESH_S) -> None:
        """Sample now unless the last sample is younger than `max_age_s`."""
        if not self._stale(max_age_s):
            return
        async with self._lock:
            if self._stale(max_age_s):  # another caller may have sampled meanwhile
                await self._sample()

    def sampled_ago_s(self) -> float | None:
        return None if self.sampled_at is None else time.monotonic() - self.sampled_at

    def lag_charts(self) -> list[tuple[str, str]]:
        """Each group's name and its lag chart of the last hour."""
        now_ms = int(time.time() * 1000)
        return [(group, lag_chart(f"lag-{index}", group, self.history.series(group), now_ms))
                for index, group in enumerate(self.groups)]

    def _stale(self, max_age_s: float) -> bool:
        return self.sampled_at is None or time.monotonic() - self.sampled_at >= max_age_s

    async def sample(self) -> None:
        async with self._lock:
            await self._sample()

    async def _sample(self) -> None:
        await asyncio.gather(self._read_groups(), self.pods.read())
        self.sampled_at = time.monotonic()

    async def _read_groups(self) -> None:
        try:
            snapshots = await self._reader.read(self.groups)
        except WaitlineError as exc:
            if self.kafka_error is None:
                log.warning("console: %s", exc)
            self.kafka_error = str(exc)
            return
        self.kafka_error = None
        self.snapshots = snapshots
        for snapshot in snapshots:
            self.history.record(snapshot)

    def views(self) -> tuple[list[GroupView], list[QuietPod]]:
        """Each group's members and pods, and the pods that speak for none of them."""
        now_ms = int(time.time() * 1000)
        sightings = self.pods.roster.sightings()
        views = [group_view(s, sightings, self.history.unchanged_since(s.group), now_ms)
                 for s in self.snapshots]
        return views, quiet_pods(views, sightings, now_ms)
