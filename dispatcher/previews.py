"""Bytes for a table cell, shared by the operator tools (`waitline dlq`, `waitline registry`,
the console) and the DLQ index; secrets in the text are masked before it is cut."""

from __future__ import annotations

from dispatcher.secrets import MASK_LOOKAHEAD_CHARS, mask_secrets


def preview_bytes(data: bytes | None, width: int = 40) -> str:
    """Bytes for a table cell: `(null)`, `(empty)`, printable UTF-8 text on one line (secrets
    masked), else `0x` and hex; cut to `width` characters with `…`."""
    if data is None:
        return "(null)"
    if not data:
        return "(empty)"
    head = data[: width * 4]  # enough bytes for `width` characters of any UTF-8 text
    text = _printable_text(head, cut=len(head) < len(data))
    if text is not None:
        if len(head) < len(data):  # masked over a longer stretch: a secret cut here is whole
            longer = data[: len(head) + MASK_LOOKAHEAD_CHARS]
            text = longer.decode("utf-8", errors="replace").translate(_ONE_LINE)
        shown, complete = mask_secrets(text), len(head) == len(data)
    else:
        shown, complete = "0x" + data[:width].hex(), len(data) <= width
    if complete and len(shown) <= width:
        return shown
    return shown[: width - 1] + "…"


_ONE_LINE = str.maketrans({"\n": " ", "\r": " ", "\t": " "})


def _printable_text(head: bytes, *, cut: bool) -> str | None:
    """`head` as one line of text, or None when it is not printable UTF-8; when `head` was
    cut from longer data, a character cut in two at its end is dropped."""
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError as exc:
        if not (cut and exc.reason == "unexpected end of data"):
            return None
        text = head[: exc.start].decode("utf-8", errors="replace")
    text = text.translate(_ONE_LINE)
    return text if text.isprintable() else None
