"""JSON read and written again without losing what `json.loads` drops (pure): a duplicate
member, a number's literal (`1e400`, a 19-digit id), a lone surrogate (`"\\ud800"`, written back
as that escape, so the text still encodes as UTF-8); and no RecursionError for a value nested
deeper than MAX_DEPTH: it is not JSON here. The console pretty-prints values with it and redacts
(`dispatcher.console.redaction`) on what it parses.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

PARSE_MAX_BYTES = 1024 * 1024
MAX_DEPTH = 200


class JsonObject(list[list[Any]]):
    """A JSON object as its [name, value] pairs in order: duplicate names are all kept."""


class JsonLiteral(str):
    """A number or constant as written (`1e400`, `4111111111111111`, `NaN`)."""

    __slots__ = ()


def parse_json(text: str) -> Any:
    """`text` as JSON, keeping duplicate members and number literals; ValueError when it is
    not JSON or is nested deeper than MAX_DEPTH."""
    try:
        value = json.loads(text, object_pairs_hook=lambda pairs: JsonObject(
            [name, item] for name, item in pairs), parse_int=JsonLiteral,
            parse_float=JsonLiteral, parse_constant=JsonLiteral)
    except RecursionError:
        raise ValueError("nested too deep") from None
    if _depth(value) > MAX_DEPTH:
        raise ValueError("nested too deep")
    return value


def _depth(value: Any) -> int:
    deepest = 0
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, list):
            deepest = max(deepest, depth)
            if depth > MAX_DEPTH:
                return depth
            children = (pair[1] for pair in node) if isinstance(node, JsonObject) else node
            stack.extend((child, depth + 1) for child in children)
    return deepest


_SURROGATE = re.compile(r"[\ud800-\udfff]")


def dump_json(value: Any, indent: int | None = None) -> str:
    """JSON text of a `parse_json` value: members in order, duplicates kept, literals as
    written, lone surrogates as `\\uXXXX` escapes (so the text encodes as UTF-8)."""
    return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}",
                          "".join(_dumped(value, indent, 0)))


def _dumped(value: Any, indent: int | None, level: int) -> Iterator[str]:
    if isinstance(value, JsonLiteral):
        yield str(value)
    elif isinstance(value, str):
        yield json.dumps(value, ensure_ascii=False)
    elif isinstance(value, list):
        is_object = isinstance(value, JsonObject)
        opening, closing = ("{", "}") if is_object else ("[", "]")
        if not value:
            yield opening + closing
            return
        inner = "" if indent is None else "\n" + " " * (indent * (level + 1))
        outer = "" if indent is None else "\n" + " " * (indent * level)
        yield opening
        for number, item in enumerate(value):
            yield ("," if indent is not None else ", ") * bool(number) + inner
            if is_object:
                yield json.dumps(item[0], ensure_ascii=False) + ": "
                yield from _dumped(item[1], indent, level + 1)
            else:
                yield from _dumped(item, indent, level + 1)
        yield outer + closing
    else:  # True, False, None
        yield json.dumps(value)


def pretty_json(data: bytes) -> str | None:
    """`data` pretty-printed when it is JSON (of at most PARSE_MAX_BYTES), else None."""
    if len(data) > PARSE_MAX_BYTES:
        return None
    try:
        return dump_json(parse_json(data.decode("utf-8")), indent=2)
    except (ValueError, UnicodeDecodeError):
        return None
