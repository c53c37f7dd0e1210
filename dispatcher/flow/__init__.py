"""Flow control cores for the engine: rate limit, key ordering, circuit breaker, adaptive window.

Each module is pure (no I/O, no asyncio): the caller passes the time (`now`, seconds on a
monotonic clock) and awaits whatever delay the core asks for.
"""
