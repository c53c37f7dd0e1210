"""Python's cyclic garbage collector, tuned for a pod with thousands of records in flight.

With the interpreter's default thresholds (700, 10, 10) a young collection runs every 700 net
allocations and a full one every 70,000 (when the older generations have grown by a quarter).
A record in flight keeps a few hundred objects alive (task, coroutine frames, futures, the HTTP
exchange, the wait record), so at N = 2,000 every full collection walks over half a million
live objects, and often. Nearly all of a record's garbage is freed by reference counting, so
collecting less often costs little memory; the pod's default runs a young collection every
50,000 allocations and a full one at most every 20 million. Measured side by side with the
defaults: a small gain, +4% to +13% TPS at N = 1,000 to 5,000, within the machine's spread
(docs/BENCHMARKS.md, "Past one core: garbage collector and `--workers`").
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

from dispatcher.errors import ConfigError

Thresholds = tuple[int, int, int]

DEFAULT_GC_THRESHOLDS = "50000,20,20"
PYTHON_DEFAULTS = "python"


def parse_gc_thresholds(text: str) -> Thresholds | None:
    """`gen0,gen1,gen2` as three positive whole numbers; None for `python` (leave the
    interpreter's own)."""
    if text.strip().lower() == PYTHON_DEFAULTS:
        return None
    parts = [part.strip() for part in text.split(",")]
    if len(parts) != 3 or not all(part.isdigit() and int(part) > 0 for part in parts):
        raise ConfigError(f"--gc-thresholds {text!r}: give three positive whole numbers "
                          f"gen0,gen1,gen2 (e.g. {DEFAULT_GC_THRESHOLDS}) or {PYTHON_DEFAULTS}")
    gen0, gen1, gen2 = (int(part) for part in parts)
    return gen0, gen1, gen2


@contextlib.contextmanager
def collector_thresholds(thresholds: Thresholds | None) -> Iterator[None]:
    """Run the block with `thresholds` (None: unchanged), then restore the previous ones."""
    previous = gc.get_threshold()
    if thresholds is not None:
        gc.set_threshold(*thresholds)
    try:
        yield
    finally:
        gc.set_threshold(*previous)
