"""Inline SVG line charts for the report: no library, no network; the page that holds them
opens from disk."""

from __future__ import annotations

import datetime as dt
import html
import itertools
import statistics
import zlib
from collections.abc import Sequence

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2",
           "#17becf", "#bcbd22", "#7f7f7f")
WIDTH, HEIGHT = 760, 300
LEFT, RIGHT, TOP, BOTTOM = 70, 190, 30, 40
Y_TICKS = 5
X_TICKS = 6
GAP_FACTOR = 2.5  # a series missing for this many typical intervals is drawn broken there

Point = tuple[dt.datetime, float]


def human(value: float) -> str:
    """12, 3.4k, 5.6M, 7.8G: short axis labels."""
    for limit, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= limit:
            return f"{value / limit:.1f}{suffix}"
    return f"{value:g}" if value == int(value) else f"{value:.1f}"


def _nice_max(value: float) -> float:
    if value <= 0:
        return 1.0
    magnitude = 10 ** (len(str(int(value))) - 1)
    for step in (1, 2, 2.5, 5, 10):
        if step * magnitude >= value:
            return step * magnitude
    return 10 * magnitude


def colour_of(name: str) -> str:
    """A series' colour from its name, so a group keeps its colour from page to page."""
    return PALETTE[zlib.crc32(name.encode()) % len(PALETTE)]


def _typical_interval(times: Sequence[float]) -> float:
    """The median time between the chart's snapshots (infinite with fewer than two)."""
    steps = [b - a for a, b in itertools.pairwise(times)]
    return statistics.median(steps) if steps else float("inf")


def _segments(ordered: Sequence[Point], gap: float) -> list[list[Point]]:
    """The points split where two neighbours are more than `gap` seconds apart: a series
    with no value there (a broker that did not answer) is not drawn across the hole."""
    segments: list[list[Point]] = []
    for point in ordered:
        if not segments or point[0].timestamp() - segments[-1][-1][0].timestamp() > gap:
            segments.append([])
        segments[-1].append(point)
    return segments


def line_chart(title: str, series: dict[str, Sequence[Point]], y_label: str) -> str:
    """An SVG chart with one line per series (time on x), its legend on the right."""
    points = [p for s in series.values() for p in s]
    esc = html.escape
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" width="{WIDTH}" '
             f'height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" '
             f'aria-label="{esc(title)}">',
             f'<text x="{LEFT}" y="18" class="title">{esc(title)}</text>']
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    if not points:
        parts.append(f'<text x="{LEFT}" y="{TOP + plot_h / 2}">no data</text></svg>')
        return "".join(parts)
    t0 = min(p[0] for p in points).timestamp()
    t1 = max(p[0] for p in points).timestamp()
    span = max(t1 - t0, 1.0)
    y_max = _nice_max(max(p[1] for p in points))

    def x(t: dt.datetime) -> float:
        return LEFT + (t.timestamp() - t0) / span * plot_w

    def y(v: float) -> float:
        return TOP + plot_h - v / y_max * plot_h

    for i in range(Y_TICKS + 1):
        v = y_max * i / Y_TICKS
        parts.append(f'<line x1="{LEFT}" x2="{LEFT + plot_w}" y1="{y(v):.1f}" y2="{y(v):.1f}" '
                     f'class="grid"/><text x="{LEFT - 6}" y="{y(v) + 4:.1f}" '
                     f'text-anchor="end">{human(v)}</text>')
    labels: set[str] = set()
    for i in range(X_TICKS + 1):
        t = dt.datetime.fromtimestamp(t0 + span * i / X_TICKS, dt.UTC)
        if f"{t:%H:%M:%S}" in labels:  # a span of a few seconds
            continue
        labels.add(f"{t:%H:%M:%S}")
        parts.append(f'<text x="{x(t):.1f}" y="{TOP + plot_h + 16}" text-anchor="middle">'
                     f'{t:%H:%M:%S}</text>')
    parts.append(f'<text x="14" y="{TOP + plot_h / 2}" transform="rotate(-90 14 '
                 f'{TOP + plot_h / 2})" text-anchor="middle">{esc(y_label)}</text>')
    parts.append(f'<line x1="{LEFT}" x2="{LEFT}" y1="{TOP}" y2="{TOP + plot_h}" class="axis"/>'
                 f'<line x1="{LEFT}" x2="{LEFT + plot_w}" y1="{TOP + plot_h}" '
                 f'y2="{TOP + plot_h}" class="axis"/>')
    gap = GAP_FACTOR * _typical_interval(sorted({p[0].timestamp() for p in points}))
    for n, (name, values) in enumerate(series.items()):
        colour = colour_of(name)
        for segment in _segments(sorted(values), gap):
            path = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in segment)
            parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2" '
                         f'points="{path}"><title>{esc(name)}</title></polyline>')
            if len(segment) == 1:
                t, v = segment[0]
                parts.append(f'<circle cx="{x(t):.1f}" cy="{y(v):.1f}" r="3" '
                             f'fill="{colour}"/>')
        ly = TOP + 14 * n + 6
        parts.append(f'<rect x="{WIDTH - RIGHT + 12}" y="{ly - 8}" width="10" height="10" '
                     f'fill="{colour}"/><text x="{WIDTH - RIGHT + 26}" y="{ly + 1}">'
                     f'{esc(name[:26])}</text>')
    parts.append("</svg>")
    return "".join(parts)
