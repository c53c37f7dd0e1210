"""Failed logins, counted per user name and shared by every console replica through PostgreSQL
(`console_login_failure`, sql/013), so N replicas behind a balancer allow no more guesses than
one, and a restart forgets nothing.

What is counted, and what a lock-out refuses:
- A password (the login form with a name, or basic auth) counts against its user name. After
  `max_failures` failures within `window_s` of each other the name is locked out for
  `lockout_s`, doubling with each further failure up to `max_lockout_s` (the bound: a name is
  never locked longer, however long the guessing goes on). While locked, a login with that name
  is refused (429) before its password is looked at, so guessing stops.
- A token (a bearer header, or the form's token field) counts against the client's address.
  A valid token is never refused, whatever the lock-outs: it is checked first, and a lock-out
  only turns a wrong token's 401 into a 429. The owner's way in while someone guesses at their
  name is a token; a token's strength is its length (at least 12 characters, not whitespace,
  not a few repeated: `dispatcher.console.settings`).
- A success clears the keys it names.

Rows hold a SHA-256 of each key, never a name (a password typed into the name field must not
be stored). The table stays small whatever an attacker sends: a configured name has a key of
its own, every other name falls into one of UNKNOWN_NAME_BUCKETS shared keys (so a made-up name
behaves like a real one, and the throttle does not tell which names exist), addresses into
ADDRESS_BUCKETS; rows idle longer than the window are removed. Times are the console's wall
clock (epoch seconds): replicas share it within NTP's accuracy.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass

from dispatcher.console import store as db

_KEY_LABEL = b"waitline-console-login:"
UNKNOWN_NAME_BUCKETS = 1024
ADDRESS_BUCKETS = 4096


def name_key(name: str, known: Collection[str]) -> str:
    """The key a password for `name` counts against: its own when `name` is configured."""
    if name in known:
        return f"name:{name}"
    return f"unknown-name:{_bucket(name, UNKNOWN_NAME_BUCKETS)}"


def address_key(address: str | None) -> str:
    """The key a token from `address` counts against."""
    return f"address:{_bucket(address or 'unknown', ADDRESS_BUCKETS)}"


def _bucket(text: str, buckets: int) -> int:
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big") % buckets


def key_digest(key: str) -> bytes:
    """What the table keeps of a throttle key."""
    return hashlib.sha256(_KEY_LABEL + key.encode()).digest()


@dataclass(frozen=True, slots=True)
class Failures:
    """One key's failures: how many in the current run, the last one, its lock-out's end."""

    count: int
    last_at: float
    locked_until: float


@dataclass(frozen=True, slots=True)
class ThrottlePolicy:
    """How failures become lock-outs (pure)."""

    max_failures: int
    window_s: float
    lockout_s: float
    max_lockout_s: float

    def after_failure(self, before: Failures | None, now: float) -> Failures:
        """The key's state after a failure at `now`: a run of failures ends `window_s` after
        its last failure or lock-out; from the `max_failures`-th on, each locks the key out,
        twice as long as the one before, at most `max_lockout_s`."""
        if before is None or now - max(before.last_at, before.locked_until) > self.window_s:
            before = Failures(0, now, 0.0)
        count = before.count + 1
        over = count - self.max_failures
        locked_until = before.locked_until
        if over >= 0:
            locked_until = now + min(self.lockout_s * 2.0 ** min(over, 64), self.max_lockout_s)
        return Failures(count, now, locked_until)

    def stale_before(self, now: float) -> float:
        """Keys whose last failure and lock-out both ended before this are forgotten."""
        return now - self.window_s


class LoginThrottle:
    """Failed logins per key, kept in the registry database (see the module docstring)."""

    def __init__(self, store: db.Store, policy: ThrottlePolicy, *,
                 clock: Callable[[], float] = time.time) -> None:
        self._store = store
        self.policy = policy
        self._clock = clock

    async def retry_after(self, keys: Iterable[str]) -> float | None:
        """Seconds until every one of `keys` may try again, or None when none is locked out."""
        now = self._clock()
        rows = await self._store.fetch(
            "SELECT max(locked_until) AS until FROM console_login_failure"
            " WHERE key_digest = ANY(%s) AND locked_until > %s",
            [[key_digest(key) for key in keys], now])
        until = rows[0]["until"] if rows else None
        return None if until is None else until - now

    async def failed(self, keys: Iterable[str]) -> float | None:
        """Count a failure against each key; the longest lock-out it started, if any."""
        now = self._clock()
        longest: float | None = None
        async with self._store.connection() as conn, conn.transaction():
            for key in sorted(set(keys)):  # one order: two replicas never deadlock
                digest = key_digest(key)
                await conn.execute(
                    "INSERT INTO console_login_failure (key_digest, failures, last_failed_at,"
                    " locked_until) VALUES (%s, 0, 0, 0) ON CONFLICT DO NOTHING", [digest])
                cur = await conn.execute(
                    "SELECT failures, last_failed_at, locked_until FROM console_login_failure"
                    " WHERE key_digest = %s FOR UPDATE", [digest])
                row = await cur.fetchone()
                before = (None if row is None or row["failures"] == 0 else
                          Failures(row["failures"], row["last_failed_at"], row["locked_until"]))
                after = self.policy.after_failure(before, now)
                await conn.execute(
                    "UPDATE console_login_failure SET failures = %s, last_failed_at = %s,"
                    " locked_until = %s WHERE key_digest = %s",
                    [after.count, after.last_at, after.locked_until, digest])
                if after.count >= self.policy.max_failures:  # this failure locked it
                    lock = after.locked_until - now
                    longest = lock if longest is None else max(longest, lock)
            await conn.execute(
                "DELETE FROM console_login_failure WHERE greatest(last_failed_at, locked_until)"
                " < %s", [self.policy.stale_before(now)])
        return longest

    async def succeeded(self, keys: Iterable[str]) -> None:
        async with self._store.connection() as conn:
            await conn.execute("DELETE FROM console_login_failure WHERE key_digest = ANY(%s)",
                               [[key_digest(key) for key in keys]])
