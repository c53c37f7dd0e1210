"""Rate limit for calls: `--rate-limit 500/s`, `30/min` or `500/s:burst=50`, per pod (a pod of
`--workers K` gives each worker its share).

`TokenBucket` is the generic cell rate algorithm (GCRA), the token bucket kept as one number:
the theoretical arrival time `tat` of the next call at the steady rate. A call is admitted at
`now` when `now >= tat - (burst - 1) * interval`, which admits at most `rate * T + burst` calls in
any span of T seconds and never lets unused time pile up more than `burst` tokens.

`RateGate` is the bucket as the engine runs it: a record takes its token after its call slot and
BEFORE its call starts, that is before its offset becomes committable (DESIGN.md), so a record a
stop or a revoke cuts off while it waits is left uncommitted to the next owner, and a long wait
writes its wait record again instead of letting it expire. Waiters are served in arrival order
(one lock, FIFO in asyncio). The limit counts calls, not the retries inside a call's deadline
(those are paced by the retry backoff).
"""

from __future__ import annotations

import asyncio
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from dispatcher.aio import RECHECK_S
from dispatcher.clock import Clock, monotonic_s
from dispatcher.errors import ConfigError

_PER_UNIT_S = {
    "s": 1.0, "sec": 1.0, "second": 1.0,
    "m": 60.0, "min": 60.0, "minute": 60.0,
    "h": 3600.0, "hour": 3600.0,
}
_PATTERN = re.compile(
    r"^\s*(?P<count>\d+(?:\.\d+)?)\s*/\s*(?P<unit>[a-z]+)\s*(?::\s*burst\s*=\s*(?P<burst>\d+)\s*)?$"
)
VALID_FORMS = "use COUNT/UNIT with UNIT s, min or h and an optional :burst=N, e.g. 500/s, " \
    "30/min or 500/s:burst=50"
# Without an explicit burst, a caller that wakes a little late (a busy event loop) must not
# lose the tokens it was owed, or a 500/s limit would admit less than 500/s: allow 50 ms worth.
DEFAULT_BURST_WINDOW_S = 0.05
# Summing float intervals drifts by ~1e-16 s per call: a caller that comes back exactly when
# told must not be refused by a rounding error, so admission tolerates this much.
_ROUNDING_SLACK_S = 1e-9


@dataclass(frozen=True)
class RateLimit:
    """At most `per_s` calls per second on average, with up to `burst` calls at once."""

    per_s: float
    burst: int

    def __post_init__(self) -> None:
        if not (math.isfinite(self.per_s) and self.per_s > 0):
            raise ConfigError(f"rate limit must be a positive number of calls, not {self.per_s}")
        if self.burst < 1:
            raise ConfigError(f"rate limit burst must be at least 1, not {self.burst}")

    def __str__(self) -> str:
        return f"{self.per_s:g}/s:burst={self.burst}"


def parse_rate_limit(text: str) -> RateLimit:
    """The limit `text` describes; raises ConfigError naming the accepted forms otherwise."""
    match = _PATTERN.match(text.lower())
    if match is None or match["unit"] not in _PER_UNIT_S:
        raise ConfigError(f"invalid rate limit {text!r}: {VALID_FORMS}")
    per_s = float(match["count"]) / _PER_UNIT_S[match["unit"]]
    if per_s <= 0:
        raise ConfigError(f"invalid rate limit {text!r}: the count must be above 0")
    if match["burst"] is None:
        burst = max(1, math.ceil(per_s * DEFAULT_BURST_WINDOW_S))
    else:
        burst = int(match["burst"])
        if burst < 1:
            raise ConfigError(f"invalid rate limit {text!r}: burst must be at least 1")
    return RateLimit(per_s=per_s, burst=burst)


class TokenBucket:
    """Admits calls at `limit`; every method takes the current time in seconds.

    The bucket starts full. Typical use: `while (wait_s := bucket.delay_s(now())) > 0: sleep`.
    """

    def __init__(self, limit: RateLimit, now: float) -> None:
        self.limit = limit
        self._interval_s = 1.0 / limit.per_s
        self._tolerance_s = (limit.burst - 1) * self._interval_s + _ROUNDING_SLACK_S
        self._tat = now  # theoretical arrival time of the next call at the steady rate

    def next_at(self, now: float) -> float:
        """The earliest time, not before `now`, at which a call would be admitted."""
        return max(now, self._tat - self._tolerance_s)

    def try_acquire(self, now: float) -> bool:
        """Take a token if one is available at `now`; False leaves the bucket unchanged."""
        if now < self._tat - self._tolerance_s:
            return False
        self._tat = max(self._tat, now) + self._interval_s
        return True

    def delay_s(self, now: float) -> float:
        """0 when a token was available and taken; otherwise the wait before trying again."""
        if self.try_acquire(now):
            return 0.0
        return self.next_at(now) - now

    def available(self, now: float) -> int:
        """Tokens that could be taken at `now` without waiting (for metrics)."""
        spare_s = now - (self._tat - self._tolerance_s)
        if spare_s < 0:
            return 0
        return min(self.limit.burst, int(spare_s / self._interval_s) + 1)


class RateGate:
    """Calls start at most at `limit`; `token` waits for the next one in arrival order."""

    def __init__(self, limit: RateLimit, clock: Clock = monotonic_s) -> None:
        self.limit = limit
        self._clock = clock  # the pod's: the loop's, bound once (`loop_clock`)
        self._bucket = TokenBucket(limit, clock())
        self._turn = asyncio.Lock()
        self._in_line = 0  # waiters between asking for the turn and getting or leaving it
        self._look: asyncio.Future[None] | None = None  # resolved by `look_now`

    def look_now(self) -> None:
        """Every waiter looks now whether it was given up, not at its next look: a stop wants
        the records it leaves to hear so within a grace shorter than RECHECK_S."""
        if self._look is not None:
            self._look.set_result(None)
            self._look = None

    def _looked_at(self) -> asyncio.Future[None]:
        """What a wait races against: resolved by the next `look_now`."""
        if self._look is None:
            self._look = asyncio.get_running_loop().create_future()
        return self._look

    async def token(self, timeout_s: float | None = None,
                    given_up: Callable[[], bool] = lambda: False) -> bool:
        """Take a token; False (none taken) when `timeout_s` passes or `given_up()` turns true
        first (looked at every RECHECK_S, and at `look_now`), in line behind other waiters as
        much as at the head: a record whose wait record is due to be written again hears so on
        time."""
        give_up_at = None if timeout_s is None else self._clock() + timeout_s
        if not await self._my_turn(give_up_at, given_up):
            return False
        try:
            while (wait_s := self._bucket.delay_s(self._clock())) > 0:
                if given_up():
                    return False
                if give_up_at is not None:
                    left = give_up_at - self._clock()
                    if left <= 0:
                        return False
                    wait_s = min(wait_s, left)
                await asyncio.wait((self._looked_at(),), timeout=min(wait_s, RECHECK_S))
            return True
        finally:
            self._turn.release()

    async def _my_turn(self, give_up_at: float | None, given_up: Callable[[], bool]) -> bool:
        """Wait for the turn, in arrival order; False, the place in line given up, once
        `give_up_at` passes or `given_up()` turns true. The place is kept while it looks."""
        if not self._turn.locked() and not self._in_line:  # free, and nobody handed it
            return await self._turn.acquire()  # taken at once, without waiting
        turn = asyncio.ensure_future(self._turn.acquire())
        self._in_line += 1
        try:
            while not turn.done():
                left = RECHECK_S if give_up_at is None else min(RECHECK_S,
                                                                give_up_at - self._clock())
                if left <= 0 or given_up():
                    break
                await asyncio.wait((turn, self._looked_at()), timeout=left,
                                   return_when=asyncio.FIRST_COMPLETED)
        except BaseException:
            self._leave(turn)
            raise
        finally:
            self._in_line -= 1
        if turn.done():
            return True
        self._leave(turn)
        return False

    def _leave(self, turn: asyncio.Task[Literal[True]]) -> None:
        """Out of line: a turn not yet given is cancelled (`Lock.acquire` then passes it on to
        the next waiter); a turn given meanwhile is released."""
        if not turn.done():
            turn.cancel()
        elif not turn.cancelled():
            self._turn.release()
