"""How list and status commands print: a table for people, or JSON lines for scripts.

`--output json` prints one compact JSON object per line (a record, a service, a summary), so a
script can stream it with `jq -c` or read it line by line.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Iterable
from typing import Annotated, Any

import typer


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
