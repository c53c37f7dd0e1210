"""Flow control for the engine, one module per policy: rate limit, key ordering, circuit breaker,
adaptive window, loop guard.

Each module holds the policy whole: its pure core (no I/O; the caller passes the time, `now`,
seconds on a monotonic clock, and awaits whatever delay the core asks for) and the runtime
wrapper the engine calls (`RateGate`, `Turns`, `Circuit`, `AdaptiveWindow`, `LoopWatch`).
"""
