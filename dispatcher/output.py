"""How list and status commands print: a table for people, or JSON lines for scripts.

`--output json` prints one compact JSON object per line (a record, a service, a summary), so a
script can stream it with `jq -c` or read it line by line.

Whatever a `waitline` command writes to stdout and stderr passes `mask_secrets` on the way
(`masked_output`, around the command root): an error line quoting a library's exception, a
crash's trace. It masks each write as a whole; the views mask their data before they lay it
out (a table may fold a long text across lines).
"""

from __future__ import annotations

import enum
import json
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import IO, Annotated, Any

import typer

from dispatcher.secrets import mask_secrets


class OutputFormat(enum.StrEnum):
    TABLE = "table"
    JSON = "json"


OutputOption = Annotated[
    OutputFormat,
    typer.Option("--output", "-o", case_sensitive=False,
                 help="table for people, json for scripts (one JSON object per line)."),
]


def echo_json_lines(objects: Iterable[dict[str, Any]]) -> None:
    """Each object as one line of compact JSON on stdout."""
    for obj in objects:
        typer.echo(json.dumps(obj, separators=(",", ":")))


class MaskedStream:
    """A text stream whose writes are masked (`dispatcher.secrets`); the rest is the wrapped
    stream's (its terminal check, encoding, binary buffer)."""

    def __init__(self, stream: IO[str]) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(mask_secrets(text))
        return len(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


@contextmanager
def masked_output() -> Iterator[None]:
    """Mask what is written to `sys.stdout` and `sys.stderr` while the block runs."""
    stdout, stderr = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = MaskedStream(stdout), MaskedStream(stderr)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = stdout, stderr
