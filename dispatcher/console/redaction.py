"""What the console shows of a record's payload: redaction by rules (pure).

Payment and personal data in a DLQ is the normal case, so the console replaces what its rules
name before any page, JSON answer or export leaves the server, for every role; an operator may
reveal one record whole, and each reveal is audited (`dispatcher.console.reveals`). The rules come
from `WAITLINE_CONSOLE_REDACTION`, a JSON object:

    {"json_paths": ["$.cardNumber", "$.customer.email", "$.items[*].pan", "$..iban"],
     "patterns": ["\\\\b\\\\d{3}-\\\\d{2}-\\\\d{4}\\\\b"],
     "builtin": ["card-number"],
     "headers": ["X-Customer-Email"]}

- `json_paths`: the value at each path of a JSON value (or key) is replaced whole, whatever its
  type. Syntax: `$` the root, `.name` or `['name']` a member, `[3]` an array item, `[*]` or `.*`
  every item or member, `..name` (or `..*`) that member at any depth. Every member of a name is
  meant, duplicates included.
- `patterns`: regular expressions (Python syntax); each match in any text shown is replaced: a
  JSON string, a JSON number's literal or a member name, a value that is not JSON, a key, a
  header, an error message, a stack trace.
- `builtin`: named rules; `card-number` (the default) is 13 to 19 digits, single spaces or
  dashes allowed between groups of at least three, that pass the Luhn check.
- `headers`: header names (any case) whose values are replaced whole, in the DLQ record's headers
  and among the original headers it carries (`ORIGINAL_HEADERS`).

JSON is parsed (as UTF-8, up to PARSE_MAX_BYTES, at most MAX_DEPTH deep) before the rules
apply, so an escaped digit (`"\\u0034111…"`) or a duplicate member does not slip past them; a
value that does not parse (not JSON, invalid UTF-8, cut, too deep, too large) is text, and for
it a path's last member name stands for the path (`"pan": …` and `pan=…` anywhere). The list's
previews are cut values: a digit run at the cut that may be the head of a card number is
replaced too. For a page, text rules read the first SCAN_MAX_BYTES of a value (a page shows
less than that); an export is redacted whole.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, field_validator

from dispatcher.console.jsontext import PARSE_MAX_BYTES, JsonObject, dump_json, parse_json
from dispatcher.dlq.records import DlqRecord
from dispatcher.dlq.rows import DlqRow
from dispatcher.wire import ORIGINAL_HEADERS

REDACTED = "[redacted]"
SCAN_MAX_BYTES = 1024 * 1024
CUT_MARK = "…"
BUILTINS = ("card-number",)


class RedactionRules(BaseModel):
    """The console's redaction rules (`WAITLINE_CONSOLE_REDACTION`); checked when loaded."""

    model_config = {"frozen": True, "extra": "forbid"}

    json_paths: list[str] = Field(default_factory=list)
    patterns: list[str] = Field(default_factory=list)
    builtin: list[Literal["card-number"]] = ["card-number"]  # pydantic copies a default
    headers: list[Annotated[str, Field(min_length=1)]] = Field(default_factory=list)

    @field_validator("json_paths")
    @classmethod
    def _paths_parse(cls, paths: list[str]) -> list[str]:
        for path in paths:
            parse_path(path)
        return paths

    @field_validator("patterns")
    @classmethod
    def _patterns_compile(cls, patterns: list[str]) -> list[str]:
        for number, pattern in enumerate(patterns, 1):
            try:
                compiled = re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"pattern {number} is not a regular expression: {exc}") from None
            if compiled.match(""):
                raise ValueError(f"pattern {number} matches the empty text")
        return patterns


# -- JSON paths -----------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class _Member:
    name: str


@dataclass(frozen=True, slots=True)
class _Item:
    index: int


@dataclass(frozen=True, slots=True)
class _Every:
    """`[*]` or `.*`: every item of an array, every member of an object."""


@dataclass(frozen=True, slots=True)
class _Below:
    """`..`: here and at every depth below (followed by the step it applies to)."""


_Step = _Member | _Item | _Every | _Below
_PATH_TOKEN = re.compile(r"""
    \.\.(?:(?P<below>[A-Za-z_$][\w$-]*)|(?P<all>\*)|(?=\[))  # ..name, ..*, ..[…]
  | \.(?P<name>[A-Za-z_$][\w$-]*)                     # .name
  | \.\*                                              # .*
  | \[\s*(?P<index>\d+)\s*\]                          # [3]
  | \[\s*\*\s*\]                                      # [*]
  | \[\s*'(?P<single>(?:[^'\\]|\\.)*)'\s*\]           # ['name']
  | \[\s*"(?P<double>(?:[^"\\]|\\.)*)"\s*\]           # ["name"]
""", re.VERBOSE)


def parse_path(path: str) -> tuple[_Step, ...]:
    """The steps of a JSON path (see the module docstring); ValueError naming the problem."""
    if not path.startswith("$"):
        raise ValueError(f"JSON path {path!r} must start with $")
    steps: list[_Step] = []
    at = 1
    while at < len(path):
        found = _PATH_TOKEN.match(path, at)
        if found is None:
            raise ValueError(f"JSON path {path!r}: cannot read it from {path[at:]!r}")
        if found.group().startswith(".."):
            steps.append(_Below())
            if found.group("below") is not None:
                steps.append(_Member(found.group("below")))
            elif found.group("all") is not None:
                steps.append(_Every())
        elif found.group("name") is not None:
            steps.append(_Member(found.group("name")))
        elif found.group("index") is not None:
            steps.append(_Item(int(found.group("index"))))
        elif found.group("single") is not None or found.group("double") is not None:
            quoted = found.group("single") if found.group("single") is not None else found.group(
                "double")
            steps.append(_Member(re.sub(r"\\(.)", r"\1", quoted)))
        else:
            steps.append(_Every())
        at = found.end()
    if not steps:
        raise ValueError(f"JSON path {path!r} names the whole value; name a member")
    if steps[-1] == _Below():
        raise ValueError(f"JSON path {path!r} ends with ..")
    return tuple(steps)


# -- the rules at work ------------------------------------------------------------------------

_CARD_RUN = re.compile(r"(?<![\d])\d{3,}(?:[ -]\d{3,})*(?![\d])")
_SEPARATOR = re.compile(r"[ -]")
_CUT_DIGITS = re.compile(r"\d(?:[ -]?\d){5,}[ -]?$")
MAX_RUN_GROUPS = 64
_CUT_TAIL_CHARS = 32


def _luhn(digits: str) -> bool:
    total = 0
    for position, char in enumerate(reversed(digits)):
        digit = ord(char) - 48
        if position % 2:
            digit = digit * 2 - 9 if digit > 4 else digit * 2
        total += digit
    return total % 10 == 0


def card_numbers(text: str) -> Iterator[tuple[int, int]]:
    """The (start, end) of every card-number-like digit run in `text`: 13 to 19 digits in
    groups of three or more, one space or dash between, passing the Luhn check. A run of more
    than MAX_RUN_GROUPS groups is not read window by window: it is given whole."""
    for run in _CARD_RUN.finditer(text):
        groups = _SEPARATOR.split(run.group())
        if len(run.group()) - len(groups) + 1 < 13:
            continue
        if len(groups) > MAX_RUN_GROUPS:
            yield run.span()
            continue
        spans, at = [], run.start()
        for group in groups:
            spans.append((at, at + len(group)))
            at += len(group) + 1
        for first in range(len(groups)):
            digits = ""
            for last in range(first, len(groups)):
                digits += groups[last]
                if len(digits) > 19:
                    break
                if len(digits) >= 13 and _luhn(digits):
                    yield spans[first][0], spans[last][1]


class Redactor:
    """Applies one set of rules to records, index rows and plan previews."""

    def __init__(self, rules: RedactionRules) -> None:
        self.rules = rules
        self._paths = [parse_path(path) for path in rules.json_paths]
        self._patterns = [re.compile(pattern) for pattern in rules.patterns]
        self._cards = "card-number" in rules.builtin
        self._headers = frozenset(name.casefold() for name in rules.headers)
        names = sorted({steps[-1].name for steps in self._paths
                        if isinstance(steps[-1], _Member)}, key=len, reverse=True)
        alternatives = "|".join(re.escape(name) for name in names)
        # A path's last member in text that is not JSON: `"name": value` and `name=value`.
        self._by_name = None if not names else re.compile(
            rf'(?P<quoted>"(?:{alternatives})"\s*:\s*)(?:"(?:[^"\\]|\\.)*"?|[^\s,}}\]]+)'
            rf"|(?P<bare>(?<![\w.-])(?:{alternatives})=)[^&\s]*")

    @property
    def active(self) -> bool:
        return bool(self._paths or self._patterns or self._cards or self._headers)

    # text and bytes

    def text(self, value: str | None, *, cut: bool = False) -> str | None:
        """A text with every pattern match (and a path's named member) replaced; `cut`: the
        text is the head of a longer one, so a digit run at its end may be a card's head."""
        if not value or not self.active:
            return value
        shown = value
        if self._by_name is not None:
            shown = self._by_name.sub(
                lambda m: (m.group("quoted") or m.group("bare"))
                + (f'"{REDACTED}"' if m.group("quoted") else REDACTED), shown)
        shown = self._scalar(shown)
        if cut and self._cards:  # only the tail is read: the rule anchors at the cut
            body = shown.removesuffix(CUT_MARK)
            head, tail = body[:-_CUT_TAIL_CHARS], body[-_CUT_TAIL_CHARS:]
            shown = head + _CUT_DIGITS.sub(REDACTED, tail) + shown[len(body):]
        return shown

    def _scalar(self, value: str) -> str:
        """Pattern and built-in rules over one text (no path names: it is not JSON text)."""
        for pattern in self._patterns:
            value = pattern.sub(REDACTED, value)
        if self._cards:
            spans = _merged(card_numbers(value))
            if spans:
                pieces, at = [], 0
                for start, end in spans:
                    pieces += [value[at:start], REDACTED]
                    at = end
                value = "".join([*pieces, value[at:]])
        return value

    def data(self, data: bytes | None, *, whole: bool = False) -> bytes | None:
        """A key or value: JSON with its paths and leaves redacted, else text; the same bytes
        when nothing was replaced (an export stays byte-exact). Text rules read the first
        SCAN_MAX_BYTES (a page shows less), or all of it when `whole` (an export)."""
        if data is None or not data or not self.active:
            return data
        if len(data) <= PARSE_MAX_BYTES:
            try:
                tree = parse_json(data.decode("utf-8"))
            except (ValueError, UnicodeDecodeError):
                pass
            else:
                redacted, changed = self._tree(tree)
                return dump_json(redacted).encode() if changed else data
        head = data if whole else data[:SCAN_MAX_BYTES]
        text = head.decode("utf-8", errors="backslashreplace")
        shown = self.text(text, cut=len(head) < len(data))
        if shown == text and len(head) == len(data):
            return data
        return (shown or "").encode("utf-8", errors="backslashreplace")

    def _tree(self, root: Any) -> tuple[Any, bool]:
        """The parsed JSON `root` with every path replaced and every leaf, name and literal
        redacted by the text rules; and whether anything changed."""
        holder = [root]
        changed = False
        for steps in self._paths:
            changed |= _replace_paths(holder, steps)
        stack: list[tuple[list[Any], int]] = [(holder, 0)]
        while stack:
            container, index = stack.pop()
            node = container[index]
            if isinstance(node, JsonObject):
                for pair in node:
                    name = self._scalar(pair[0])
                    if name != pair[0]:
                        pair[0], changed = name, True
                    stack.append((pair, 1))
            elif isinstance(node, list):
                stack.extend((node, i) for i in range(len(node)))
            elif isinstance(node, str):
                shown = self._scalar(str(node))
                if shown != node:
                    # A literal (a number) that held a match becomes a string.
                    container[index], changed = shown, True
        return holder[0], changed

    # records, rows, previews

    def header(self, name: str, value: bytes | None) -> bytes | None:
        if value is None or not self.active:
            return value
        if name.casefold() in self._headers:
            return REDACTED.encode()
        if name == ORIGINAL_HEADERS and self._headers:
            value = self._original_headers(value)
        return self.data(value)

    def _original_headers(self, value: bytes) -> bytes:
        """ORIGINAL_HEADERS (an object of name -> value, or [name, value] pairs) with the
        named headers' values replaced."""
        try:
            tree = parse_json(value.decode("utf-8"))
        except (ValueError, UnicodeDecodeError):
            return value
        changed = False
        pairs: Iterable[list[Any]] = tree if isinstance(tree, JsonObject) else (
            pair for pair in (tree if isinstance(tree, list) else [])
            if isinstance(pair, list) and not isinstance(pair, JsonObject) and len(pair) == 2)
        for pair in pairs:
            if isinstance(pair[0], str) and pair[0].casefold() in self._headers:
                pair[1], changed = REDACTED, True
        return dump_json(tree).encode() if changed else value

    def record(self, record: DlqRecord) -> DlqRecord:
        """`record` as the rules let it be shown."""
        if not self.active:
            return record
        key, value = self.data(record.key), self.data(record.value)
        headers = tuple((name, self.header(name, data)) for name, data in record.headers)
        entry = record.entry
        if entry is not None:
            source = entry.source
            failure = entry.failure
            entry = replace(
                entry, source=replace(
                    source, key=key if source.key == record.key else self.data(source.key),
                    value=value if source.value == record.value else self.data(source.value),
                    headers=tuple((n, self.header(n, v)) for n, v in source.headers)),
                failure=replace(failure, message=self.text(failure.message) or "",
                                stacktrace=self.text(failure.stacktrace)))
        return replace(record, key=key, value=value, headers=headers, entry=entry,
                       problem=self.text(record.problem))

    def row(self, row: Mapping[str, Any]) -> dict[str, Any]:
        """A row of the DLQ index (`dispatcher.console.query.ROW_COLUMNS`) as it may be shown."""
        shown = dict(row)
        if not self.active:
            return shown
        for name in ("key_preview", "value_preview"):
            preview = shown.get(name)
            if isinstance(preview, str):
                shown[name] = self.text(preview, cut=preview.endswith(CUT_MARK))
        for name in ("message", "problem"):
            if isinstance(shown.get(name), str):
                shown[name] = self.text(shown[name])
        return shown

    def preview(self, row: DlqRow) -> DlqRow:
        """A redrive plan's preview row as it may be shown."""
        if not self.active:
            return row
        return replace(row, key=self.data(row.key), message=self.text(row.message) or "",
                       value_preview=self.text(row.value_preview,
                                               cut=row.value_preview.endswith(CUT_MARK)) or "")


def _replace_paths(holder: list[Any], steps: tuple[_Step, ...]) -> bool:
    """Replace, in the tree held by `holder`, every value `steps` reach; whether any was."""
    changed = False
    stack: list[tuple[list[Any], int, int]] = [(holder, 0, 0)]
    while stack:
        container, index, at = stack.pop()
        node = container[index]
        if at == len(steps):
            container[index], changed = REDACTED, True
            continue
        step = steps[at]
        if isinstance(step, _Below):
            stack.append((container, index, at + 1))
            stack.extend((child, slot, at) for child, slot in _children(node))
        elif isinstance(step, _Every):
            stack.extend((child, slot, at + 1) for child, slot in _children(node))
        elif isinstance(step, _Member):
            if isinstance(node, JsonObject):
                stack.extend((pair, 1, at + 1) for pair in node if pair[0] == step.name)
        elif (isinstance(node, list) and not isinstance(node, JsonObject)
              and step.index < len(node)):
            stack.append((node, step.index, at + 1))
    return changed


def _children(node: Any) -> list[tuple[list[Any], int]]:
    """Where each child of a JSON container sits: (its container, its index there)."""
    if isinstance(node, JsonObject):
        return [(pair, 1) for pair in node]
    if isinstance(node, list):
        return [(node, i) for i in range(len(node))]
    return []


def _merged(spans: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return merged
