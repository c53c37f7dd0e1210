"""The console's SVG charts (pure): well-formed SVG with no script and no inline style, a title
and numbers for screen readers, patterns and dashes besides colour, round scales, an empty state,
one class, many classes, huge counts, hostile labels."""

from __future__ import annotations

import itertools
import re
import xml.etree.ElementTree as ET

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dispatcher.console.charts import (
    HEIGHT,
    MARGIN_BOTTOM,
    MARGIN_TOP,
    MAX_CLASSES,
    MAX_LINES,
    Axis,
    Bar,
    Line,
    compact,
    line_chart,
    nice_ticks,
    progress_chart,
    stacked_bars,
)

pytestmark = pytest.mark.unit

NS = {"s": "http://www.w3.org/2000/svg"}
PLOT_HEIGHT = HEIGHT - MARGIN_TOP - MARGIN_BOTTOM
MINUTES = Axis(-3600, 0, "minutes ago", lambda s: f"{-s / 60:.0f}")


def _svg(html: str) -> ET.Element:
    assert "<script" not in html and "style=" not in html and " on" not in html.lower()
    return ET.fromstring(html)


def _titles(root: ET.Element) -> list[str]:
    return [t.text or "" for t in root.iter("{http://www.w3.org/2000/svg}title")]


def _bars(hours: int, parts: dict[str, int]) -> list[Bar]:
    return [Bar(f"hour {h}", str(h) if h % 6 == 0 else "", parts) for h in range(hours)]


def test_no_data_says_so_instead_of_an_empty_frame() -> None:
    assert stacked_bars("c", "DLQ", [], y_unit="records", x_unit="hour", empty="Nothing.") == (
        '<p class="chart-empty">Nothing.</p>')
    quiet = _bars(24, {"TimeoutError": 0})
    assert "Nothing." in stacked_bars("c", "DLQ", quiet, y_unit="r", x_unit="h", empty="Nothing.")
    assert "None yet" in line_chart("l", "Lag", [Line("orders/0", [])], x=MINUTES, y_unit="r",
                                    empty="None yet")
    assert "Not started" in progress_chart("p", "Redrive", [], planned=10, rate_cap=5,
                                           empty="Not started")


def test_one_class_draws_a_titled_labelled_chart_with_units() -> None:
    bars = [Bar("2024-06-01 13:00 UTC", "13:00", {"TimeoutError": 40}),
            Bar("2024-06-01 14:00 UTC", "14:00", {"TimeoutError": 10})]
    root = _svg(stacked_bars("dlq-24h", "DLQ arrivals per hour", bars,
                             y_unit="records per hour", x_unit="hour (UTC)", empty="-"))
    assert root.get("role") == "img"
    assert root.get("aria-labelledby") == "dlq-24h-title dlq-24h-desc"
    titles = _titles(root)
    assert titles[0] == "DLQ arrivals per hour"
    assert "2024-06-01 13:00 UTC: TimeoutError 40" in titles
    assert "2024-06-01 13:00 UTC: 40 (TimeoutError 40)" in titles
    desc = root.find("s:desc", NS)
    assert desc is not None and "50 in all" in (desc.text or "")
    texts = [t.text for t in root.iter("{http://www.w3.org/2000/svg}text")]
    assert "records per hour" in texts and "hour (UTC)" in texts and "13:00" in texts
    assert len(root.findall(".//s:pattern", NS)) == 1


def test_bar_heights_follow_the_scale_and_stay_inside_the_plot() -> None:
    bars = [Bar("a", "", {"X": 30, "Y": 10}), Bar("b", "", {"X": 5})]
    root = _svg(stacked_bars("c", "t", bars, y_unit="r", x_unit="h", empty="-"))
    heights = {(r.findtext("s:title", namespaces=NS) or ""): float(r.get("height", 0))
               for r in root.iter("{http://www.w3.org/2000/svg}rect") if r.get("y")}
    top = nice_ticks(40)[-1]
    assert heights["a: X 30"] == pytest.approx(30 / top * PLOT_HEIGHT, abs=0.01)
    assert heights["a: Y 10"] == pytest.approx(10 / top * PLOT_HEIGHT, abs=0.01)
    for rect in root.iter("{http://www.w3.org/2000/svg}rect"):
        if rect.get("y") and rect.findtext("s:title", namespaces=NS):
            assert MARGIN_TOP - 0.01 <= float(rect.get("y", 0)) <= HEIGHT - MARGIN_BOTTOM


def test_many_classes_keep_the_largest_and_stack_the_rest_as_other() -> None:
    parts = {f"Error{i:02d}": 100 - i for i in range(12)}
    root = _svg(stacked_bars("c", "t", [Bar("h", "", parts)], y_unit="r", x_unit="h",
                             empty="-"))
    legends = [g.findtext("s:title", namespaces=NS) or "" for g in root.iter(
        "{http://www.w3.org/2000/svg}g") if g.get("class") == "legend"]
    assert len(legends) == MAX_CLASSES
    rest = sum(100 - i for i in range(MAX_CLASSES - 1, 12))
    assert legends[-1] == f"other (5 classes): {rest} in all"
    assert "h: other " + str(rest) in _titles(root)
    fills = {r.get("fill") for r in root.iter("{http://www.w3.org/2000/svg}rect")
             if (r.get("fill") or "").startswith("url(")}
    assert len(fills) == MAX_CLASSES, "each drawn class has a pattern of its own"
    paths = [p.findall("*")[-1] for p in root.findall(".//s:pattern", NS)]
    overlays = {ET.tostring(p) for p in paths}
    assert len(overlays) == MAX_CLASSES, "patterns differ, not only colours"


def test_huge_counts_are_exact_in_titles_and_rounded_on_the_axis() -> None:
    bars = [Bar("h1", "", {"TimeoutError": 3_123_456_789}), Bar("h2", "", {"TimeoutError": 1})]
    root = _svg(stacked_bars("c", "t", bars, y_unit="r", x_unit="h", empty="-"))
    assert "h1: TimeoutError 3,123,456,789" in _titles(root)
    texts = [t.text or "" for t in root.iter("{http://www.w3.org/2000/svg}text")]
    assert "4G" in texts and "0" in texts
    assert all(float(r.get("height", 0)) <= PLOT_HEIGHT + 0.01
               for r in root.iter("{http://www.w3.org/2000/svg}rect"))


def test_labels_from_data_are_escaped() -> None:
    hostile = '<script>alert("x")</script>&'
    html = stacked_bars("c", hostile, [Bar(hostile, hostile, {hostile: 3})], y_unit="r",
                        x_unit="h", empty="-")
    root = _svg(html)
    assert hostile in _titles(root) and "<script>" not in html


@given(st.floats(min_value=1e-3, max_value=1e15, allow_nan=False))
def test_ticks_are_round_evenly_spaced_and_cover_the_top(top: float) -> None:
    ticks = nice_ticks(top)
    step = ticks[1] - ticks[0]
    assert ticks[0] == 0 and ticks[-1] >= top * (1 - 1e-9)
    assert 2 <= len(ticks) <= 5
    assert ticks[-1] - step < top or ticks[-1] == 1, "no tick wasted above the data"
    assert all(t2 - t1 == pytest.approx(step) for t1, t2 in itertools.pairwise(ticks))
    mantissa, _, _exponent = f"{step:e}".partition("e")
    assert step >= 1 and float(mantissa) in (1, 2, 5)


def test_compact_numbers() -> None:
    assert [compact(n) for n in (0, 950, 1000, 1234, 3_400_000, 2e9, 0.5)] == [
        "0", "950", "1k", "1.2k", "3.4M", "2G", "0.5"]


def _lag(label: str, peak: float) -> Line:
    return Line(label, [(-3600 + 60 * i, peak * (i % 5) / 4) for i in range(61)])


def test_lines_carry_their_numbers_a_dash_pattern_and_a_label_at_their_end() -> None:
    lines = [_lag("orders/0", 400), _lag("orders/1", 8)]
    root = _svg(line_chart("lag", "Lag per partition", lines, x=MINUTES,
                           y_unit="records behind", empty="-"))
    titles = _titles(root)
    assert any(t.startswith("orders/0: now 0, peak 400 at") and "minutes ago" in t
               for t in titles)
    dashes = [p.get("stroke-dasharray") for p in root.iter("{http://www.w3.org/2000/svg}polyline")]
    assert len(set(dashes)) == 2
    labels = [t.text for t in root.iter("{http://www.w3.org/2000/svg}text")
              if t.get("class") == "end-label"]
    assert sorted(labels) == ["orders/0", "orders/1"]


def test_many_lines_keep_the_highest_and_sum_the_rest_and_labels_never_overlap() -> None:
    lines = [_lag(f"orders/{i}", 10 * i) for i in range(20)]
    root = _svg(line_chart("lag", "t", lines, x=MINUTES, y_unit="r", empty="-"))
    labels = [(float(t.get("y", 0)), t.text) for t in root.iter(
        "{http://www.w3.org/2000/svg}text") if t.get("class") == "end-label"]
    assert len(labels) == MAX_LINES
    assert any(text == f"other ({20 - MAX_LINES + 1} summed)" for _, text in labels)
    ys = sorted(y for y, _ in labels)
    assert all(b - a >= 13 - 1e-6 for a, b in itertools.pairwise(ys))


def test_a_redrive_is_drawn_against_its_rate_cap_and_its_plan() -> None:
    sent = [(0.0, 0), (10.0, 180), (20.0, 400), (30.0, 600)]
    root = _svg(progress_chart("redrive", "Progress", sent, planned=1000, rate_cap=20,
                               empty="-"))
    labels = [t.text for t in root.iter("{http://www.w3.org/2000/svg}text")
              if t.get("class") == "end-label"]
    assert sorted(labels) == ["planned 1,000", "rate cap 20/s", "sent 600 (20/s)"]
    titles = _titles(root)
    assert any(t.startswith("sent 600 (20/s): now 600") for t in titles)
    assert "records" in [t.text for t in root.iter("{http://www.w3.org/2000/svg}text")]
    assert re.search(r"seconds since it began", ET.tostring(root, encoding="unicode"))
