"""Charts as inline SVG, rendered on the server (pure): bars stacked by class, lines over time,
and a redrive's progress against its cap. No script and no inline style (the console's CSP
allows neither): colours, patterns and dashes are SVG presentation attributes, sizes and fonts
come from `console.css` (`svg.chart`).

Readable without colour: each class of a stacked bar has a fill pattern of its own as well as a
colour, each line a dash pattern and a labelled end, and the legend repeats both. Readable
without sight: the chart's `<title>` names it, its `<desc>` gives the totals, and every bar,
bar segment and line carries a `<title>` with its numbers (exact, with thousands separators;
the axes round them). Every axis says its unit. No data gives a short sentence, not an empty
frame. Every text that comes from data (an error class, a topic) is escaped.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from dispatcher.console.render import text

WIDTH, HEIGHT = 760, 260
MARGIN_LEFT, MARGIN_RIGHT, MARGIN_TOP, MARGIN_BOTTOM = 64, 200, 14, 46
MAX_CLASSES = 8  # more error classes than this: the smallest are stacked as one "other" part
MAX_LINES = 8  # more series than this: those with the lowest peaks are summed as one line
OTHER = "other"
# Okabe-Ito: told apart by most people with a colour vision deficiency; patterns do the rest.
COLOURS = ("#0072b2", "#e69f00", "#009e73", "#cc79a7", "#56b4e9", "#d55e00", "#f0e442",
           "#555555")
OTHER_COLOUR = "#9a9a9a"
# White strokes over the fill, one tile of 8 by 8 (the first class is plain).
PATTERNS = ("", "M-2,2 l4,-4 M0,8 l8,-8 M6,10 l4,-4", "dots", "M0,4 h8",
            "M0,0 l8,8 M8,0 l-8,8", "M4,0 v8", "M-2,6 l4,4 M0,0 l8,8 M6,-2 l4,4",
            "M0,4 h8 M4,0 v8")
DASHES = ("", "7 3", "2 3", "9 3 2 3", "1 2", "12 4", "4 2 1 2", "14 3 3 3")
MARKERS = ("circle", "square", "triangle", "diamond")


def count(n: float) -> str:
    """An exact count for a title: 1,234,567."""
    return f"{round(n):,}"


def compact(n: float) -> str:
    """A rounded count for an axis: 950, 1.2k, 3.4M, 1.1G."""
    for size, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(n) >= size:
            shown = f"{n / size:.1f}".removesuffix(".0")
            return f"{shown}{suffix}"
    return f"{n:g}" if n != round(n) else str(round(n))


def nice_ticks(top: float, steps: int = 4) -> list[float]:
    """Ticks from 0 to a round number at or above `top`, in at most `steps` steps of 1, 2 or 5
    times a power of ten, never below 1 (the charts count records)."""
    if not math.isfinite(top) or top <= 0:
        return [0.0, 1.0]
    raw = top / steps
    power = 10 ** math.floor(math.log10(raw))
    step = max(1.0, next(m * power for m in (1, 2, 5, 10) if m * power >= raw * (1 - 1e-12)))
    n = max(1, math.ceil(top / step - 1e-9))
    return [i * step for i in range(n + 1)]


@dataclass(frozen=True, slots=True)
class Bar:
    """One bar: `label` names it in titles ("2024-06-01 13:00 UTC"), `tick` on the axis ("" for
    none), `parts` its count per class."""

    label: str
    tick: str
    parts: Mapping[str, int]

    @property
    def total(self) -> int:
        return sum(self.parts.values())


@dataclass(frozen=True, slots=True)
class Line:
    """One series: `points` are (x, y), x in the chart's unit, in increasing order."""

    label: str
    points: Sequence[tuple[float, float]]

    @property
    def peak(self) -> float:
        return max((y for _, y in self.points), default=0.0)


@dataclass(frozen=True, slots=True)
class Axis:
    """An x axis over [low, high], its unit, and how a value is written on it."""

    low: float
    high: float
    unit: str
    tick: Callable[[float], str]
    ticks: Sequence[float] = field(default_factory=tuple)


def empty_chart(message: str) -> str:
    return f'<p class="chart-empty">{text(message)}</p>'


def _frame(chart_id: str, title: str, desc: str, body: str, width: int) -> str:
    return (f'<svg class="chart" id="{text(chart_id)}" role="img" width="{width}" '
            f'height="{HEIGHT}" viewBox="0 0 {width} {HEIGHT}" font-size="11" '
            f'font-family="system-ui, sans-serif" aria-labelledby="{text(chart_id)}-title '
            f'{text(chart_id)}-desc" xmlns="http://www.w3.org/2000/svg">'
            f'<title id="{text(chart_id)}-title">{text(title)}</title>'
            f'<desc id="{text(chart_id)}-desc">{text(desc)}</desc>{body}</svg>')


def _plot_box(width: int) -> tuple[float, float, float, float]:
    """left, top, width, height of the plotting area of a chart `width` wide."""
    return (MARGIN_LEFT, MARGIN_TOP, width - MARGIN_LEFT - MARGIN_RIGHT,
            HEIGHT - MARGIN_TOP - MARGIN_BOTTOM)


def _y_axis(ticks: Sequence[float], unit: str, chart_width: int) -> str:
    left, top, width, height = _plot_box(chart_width)
    scale = height / ticks[-1]
    parts = []
    for value in ticks:
        y = top + height - value * scale
        parts.append(f'<line class="grid" x1="{left}" x2="{left + width}" y1="{y:.1f}" '
                     f'y2="{y:.1f}" stroke="#d9dde5" stroke-width="1"/>'
                     f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">'
                     f"{text(compact(value))}</text>")
    middle = top + height / 2
    parts.append(f'<text class="unit" x="14" y="{middle:.1f}" text-anchor="middle" '
                 f'transform="rotate(-90 14 {middle:.1f})">{text(unit)}</text>')
    return "".join(parts)


def _x_unit(unit: str, chart_width: int) -> str:
    left, top, width, height = _plot_box(chart_width)
    return (f'<text class="unit" x="{left + width / 2:.1f}" y="{HEIGHT - 6}" '
            f'text-anchor="middle">{text(unit)}</text>'
            f'<line x1="{left}" x2="{left + width}" y1="{top + height}" y2="{top + height}" '
            f'stroke="#4a5468" stroke-width="1"/>')


def _pattern(chart_id: str, index: int, colour: str) -> str:
    shape = PATTERNS[index % len(PATTERNS)]
    overlay = ""
    if shape == "dots":
        overlay = '<circle cx="4" cy="4" r="1.6" fill="#ffffff"/>'
    elif shape:
        overlay = f'<path d="{shape}" stroke="#ffffff" stroke-width="1.6" fill="none"/>'
    return (f'<pattern id="{text(chart_id)}-p{index}" width="8" height="8" '
            f'patternUnits="userSpaceOnUse"><rect width="8" height="8" fill="{colour}"/>'
            f"{overlay}</pattern>")


def _classes(bars: Sequence[Bar]) -> tuple[list[str], dict[str, int], dict[str, str]]:
    """The classes to draw, largest first, and each class's total; beyond MAX_CLASSES the
    smallest become OTHER (the map says which part each class is drawn in)."""
    totals: dict[str, int] = {}
    for bar in bars:
        for name, n in bar.parts.items():
            totals[name] = totals.get(name, 0) + n
    ranked = sorted((name for name, n in totals.items() if n > 0),
                    key=lambda name: (-totals[name], name))
    if len(ranked) <= MAX_CLASSES:
        return ranked, totals, {name: name for name in ranked}
    kept = ranked[:MAX_CLASSES - 1]
    drawn_as = {name: name for name in kept} | dict.fromkeys(ranked[MAX_CLASSES - 1:], OTHER)
    totals[OTHER] = sum(totals[name] for name in ranked[MAX_CLASSES - 1:])
    return [*kept, OTHER], totals, drawn_as


def stacked_bars(chart_id: str, title: str, bars: Sequence[Bar], *, y_unit: str, x_unit: str,
                 empty: str, width: int = WIDTH) -> str:
    """Bars stacked by class (e.g. DLQ arrivals per hour by error class)."""
    classes, totals, drawn_as = _classes(bars)
    if not classes:
        return empty_chart(empty)
    grand = sum(bar.total for bar in bars)
    others = sorted(name for name, part in drawn_as.items() if part == OTHER)
    busiest = max(bars, key=lambda bar: bar.total)
    desc = (f"{count(grand)} in all over {len(bars)} bars; by class: "
            + "; ".join(f"{name} {count(totals[name])}" for name in classes)
            + (f" ({OTHER}: {', '.join(others)})" if others else "")
            + f". Highest: {busiest.label}, {count(busiest.total)}.")
    style = {name: (f"url(#{chart_id}-p{i})", i) for i, name in enumerate(classes)}
    defs = "<defs>" + "".join(
        _pattern(chart_id, i, OTHER_COLOUR if name == OTHER else COLOURS[i % len(COLOURS)])
        for i, name in enumerate(classes)) + "</defs>"
    ticks = nice_ticks(max(bar.total for bar in bars))
    left, top, plot_width, height = _plot_box(width)
    scale = height / ticks[-1]
    slot = plot_width / len(bars)
    gap = min(2.0, slot * 0.2)
    shapes = []
    for index, bar in enumerate(bars):
        x = left + index * slot + gap / 2
        parts: dict[str, int] = {}
        for name, n in bar.parts.items():
            if n > 0:
                parts[drawn_as[name]] = parts.get(drawn_as[name], 0) + n
        segments = []
        base = top + height
        for name in classes:
            if not parts.get(name):
                continue
            h = parts[name] * scale
            segments.append(
                f'<rect x="{x:.2f}" y="{base - h:.2f}" width="{slot - gap:.2f}" '
                f'height="{h:.2f}" fill="{style[name][0]}" stroke="#ffffff" stroke-width="0.5">'
                f"<title>{text(bar.label)}: {text(name)} {count(parts[name])}</title></rect>")
            base -= h
        detail = "; ".join(f"{name} {count(parts[name])}" for name in classes if parts.get(name))
        summary = f"{bar.label}: {count(bar.total)}" + (f" ({detail})" if detail else "")
        tick = ""
        if bar.tick:
            tick = (f'<text x="{x + (slot - gap) / 2:.1f}" y="{top + height + 14}" '
                    f'text-anchor="middle">{text(bar.tick)}</text>')
        shapes.append(f'<g class="bar"><title>{text(summary)}</title>{"".join(segments)}'
                      f"{tick}</g>")
    legend = []
    for i, name in enumerate(classes):
        y = top + 4 + i * 20
        label = name if name != OTHER else f"{OTHER} ({len(others)} classes)"
        legend.append(f'<g class="legend"><title>{text(label)}: {count(totals[name])} in all'
                      f'</title><rect x="{left + plot_width + 14}" y="{y}" width="14" '
                      f'height="14" fill="{style[name][0]}" stroke="#4a5468" '
                      f'stroke-width="0.5"/><text x="{left + plot_width + 34}" y="{y + 11}">'
                      f"{text(_cut(label, 22))} ({text(compact(totals[name]))})</text></g>")
    body = (defs + _y_axis(ticks, y_unit, width) + "".join(shapes) + _x_unit(x_unit, width)
            + "".join(legend))
    return _frame(chart_id, title, desc, body, width)


def _cut(label: str, chars: int) -> str:
    return label if len(label) <= chars else label[: chars - 1] + "…"


def _summed(lines: Sequence[Line]) -> list[Line]:
    """At most MAX_LINES lines: those with the lowest peaks summed into one."""
    if len(lines) <= MAX_LINES:
        return list(lines)
    ranked = sorted(lines, key=lambda line: (-line.peak, line.label))
    kept, rest = ranked[:MAX_LINES - 1], ranked[MAX_LINES - 1:]
    sums: dict[float, float] = {}
    for line in rest:
        for x, y in line.points:
            sums[x] = sums.get(x, 0.0) + y
    return [*kept, Line(f"{OTHER} ({len(rest)} summed)", sorted(sums.items()))]


def line_chart(chart_id: str, title: str, lines: Sequence[Line], *, x: Axis, y_unit: str,
               empty: str, reference: Sequence[Line] = (), y_top: float | None = None,
               width: int = WIDTH) -> str:
    """Lines over x (e.g. lag per partition over the last hour), each labelled at its end;
    `reference` lines (a cap, a target) are drawn thin and grey, labelled the same way."""
    drawn = _summed([line for line in lines if line.points])
    if not drawn:
        return empty_chart(empty)
    peak = max([line.peak for line in (*drawn, *reference)] + [y_top or 0.0])
    ticks = nice_ticks(peak if peak > 0 else 1)
    left, top, plot_width, height = _plot_box(width)
    y_scale = height / ticks[-1]
    span = (x.high - x.low) or 1.0

    def at(px: float, py: float) -> tuple[float, float]:
        return (left + (min(max(px, x.low), x.high) - x.low) / span * plot_width,
                top + height - min(py, ticks[-1]) * y_scale)

    shapes: list[str] = []
    ends: list[tuple[float, str, str, int | None]] = []
    for i, line in enumerate(reference):
        coords = " ".join(f"{cx:.1f},{cy:.1f}" for cx, cy in (at(*p) for p in line.points))
        shapes.append(f'<polyline class="reference" points="{coords}" fill="none" '
                      f'stroke="#4a5468" stroke-width="1" stroke-dasharray="{4 + 2 * i} 3">'
                      f"<title>{text(line.label)}</title></polyline>")
        ends.append((at(*line.points[-1])[1], line.label, "#4a5468", None))
    for i, line in enumerate(drawn):
        colour = COLOURS[i % len(COLOURS)]
        coords = " ".join(f"{cx:.1f},{cy:.1f}" for cx, cy in (at(*p) for p in line.points))
        last_x, last_y = line.points[-1]
        peak_x, peak_y = max(line.points, key=lambda p: p[1])
        mean = sum(y for _, y in line.points) / len(line.points)
        summary = (f"{line.label}: now {count(last_y)}, peak {count(peak_y)} at "
                   f"{x.tick(peak_x)} {x.unit}, mean {count(mean)} over {len(line.points)} "
                   "samples")
        dash = DASHES[i % len(DASHES)]
        dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
        marker = _marker(i, *at(last_x, last_y), colour)
        shapes.append(f'<g class="line"><title>{text(summary)}</title><polyline '
                      f'points="{coords}" fill="none" stroke="{colour}" stroke-width="2"'
                      f'{dash_attr}/>{marker}</g>')
        ends.append((at(last_x, last_y)[1], line.label, colour, i))
    ticks_x = x.ticks or [x.low + span * k / 4 for k in range(5)]
    x_labels = "".join(
        f'<text x="{at(value, 0)[0]:.1f}" y="{top + height + 14}" text-anchor="middle">'
        f"{text(x.tick(value))}</text>" for value in ticks_x)
    desc = "; ".join(f"{line.label} now {count(line.points[-1][1])}, peak {count(line.peak)}"
                     for line in drawn) + "."
    body = (_y_axis(ticks, y_unit, width) + "".join(shapes) + x_labels + _x_unit(x.unit, width)
            + _end_labels(ends, left + plot_width, width))
    return _frame(chart_id, title, desc, body, width)


def _marker(index: int, cx: float, cy: float, colour: str) -> str:
    shape = MARKERS[index % len(MARKERS)]
    if shape == "circle":
        return f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="3.5" fill="{colour}"/>'
    if shape == "square":
        return f'<rect x="{cx - 3.5:.1f}" y="{cy - 3.5:.1f}" width="7" height="7" fill="{colour}"/>'
    if shape == "triangle":
        return (f'<path d="M{cx:.1f},{cy - 4.5:.1f} l4.5,8 h-9 z" fill="{colour}"/>')
    return f'<path d="M{cx:.1f},{cy - 5:.1f} l5,5 l-5,5 l-5,-5 z" fill="{colour}"/>'


def _end_labels(ends: list[tuple[float, str, str, int | None]], x: float,
                chart_width: int) -> str:
    """Direct labels right of the plot at each line's last value, pushed apart so none overlap
    (a short leader from the line's end when a label had to move)."""
    placed: list[float] = []
    out = []
    _left, top, _width, height = _plot_box(chart_width)
    for y, label, colour, index in sorted(ends):
        want = max(min(y, top + height), top + 6)
        at = max(want, placed[-1] + 13) if placed else want
        placed.append(at)
        dash = "" if index is None else DASHES[index % len(DASHES)]
        dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
        out.append(f'<line x1="{x + 2}" y1="{y:.1f}" x2="{x + 20}" y2="{at:.1f}" '
                   f'stroke="{colour}" stroke-width="2"{dash_attr}/>'
                   f'<text class="end-label" x="{x + 24}" y="{at + 4:.1f}">'
                   f"{text(_cut(label, 26))}</text>")
    return "".join(out)


def progress_chart(chart_id: str, title: str, sent: Sequence[tuple[float, int]], *,
                   planned: int, rate_cap: float, empty: str) -> str:
    """A redrive's records sent (acknowledged) over the seconds since it began, against the
    most its rate cap allows at each moment and the records planned."""
    if not sent:
        return empty_chart(empty)
    end_s = max(sent[-1][0], 1.0)
    cap_s = planned / rate_cap if rate_cap > 0 else end_s
    high = max(end_s, min(cap_s, end_s * 4))
    cap = Line(f"rate cap {compact(rate_cap)}/s", [(0, 0), (min(cap_s, high),
                                                           min(planned, rate_cap * high))])
    target = Line(f"planned {count(planned)}", [(0, planned), (high, planned)])
    done = sent[-1][1]
    rate = done / sent[-1][0] if sent[-1][0] > 0 else 0.0
    line = Line(f"sent {count(done)} ({rate:,.0f}/s)", [(float(t), float(n)) for t, n in sent])
    axis = Axis(0, high, "seconds since it began", lambda s: f"{s:,.0f}")
    return line_chart(chart_id, title, [line], x=axis, y_unit="records", empty=empty,
                      reference=[cap, target], y_top=planned)
