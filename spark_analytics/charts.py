"""Inline SVG line charts for the report: no library, no network; the page that holds them
opens from disk.

Time runs left to right in UTC. Ticks fall on round times (every 1, 2, 5, 10, 15 or 30
seconds, minutes, hours...). Values go from 0 to a round step of 1, 2, 2.5 or 5 × 10^k
(whole steps for counts). A series is joined only between neighbouring snapshots of the
chart, so a value missing at some snapshot (a broker that did not answer) leaves a hole in
its line. A stretch with no snapshot at all is shaded; when it would take over the chart
(two runs of the collector minutes apart), it is cut out and drawn as a narrow band saying
how long it lasted, so each run gets a readable share of the width.
"""

from __future__ import annotations

import bisect
import dataclasses
import datetime as dt
import html
import itertools
import math
import statistics
import zlib
from collections.abc import Sequence

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2",
           "#17becf", "#bcbd22", "#7f7f7f")
WIDTH, HEIGHT = 760, 300
LEFT, RIGHT, TOP, BOTTOM = 70, 190, 30, 52
Y_TICKS = 5  # at most this many steps up the value axis
TICK_PX = 56  # at least this far apart, time ticks
LABEL_PX = 52  # and their labels (HH:MM:SS is ~48 px wide); one too close is left out
GAP_FACTOR = 2.5  # no snapshot for this many typical intervals: a hole
# A hole longer than this share of the chart's time span is cut out of the time axis and
# drawn BREAK_PX wide; each stretch of snapshots around it gets at least MIN_STRETCH_PX.
CUT_SHARE = 0.2
BREAK_PX = 28
MIN_STRETCH_PX = 70
# Round time steps, seconds.
TIME_STEPS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600,
              43200, 86400, 2 * 86400, 7 * 86400, 30 * 86400)

Point = tuple[dt.datetime, float]


def human(value: float) -> str:
    """12, 3.4k, 5.6M, 7.8G: short table figures."""
    for limit, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= limit:
            return f"{value / limit:.1f}{suffix}"
    return f"{value:g}" if value == int(value) else f"{value:.1f}"


def axis_label(value: float) -> str:
    """0, 0.25, 20, 2.5k, 8k, 1.25M: a round tick value without trailing zeros."""
    for limit, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= limit:
            return f"{value / limit:.3g}{suffix}"
    return f"{value:.3g}"


def legend_value(value: float) -> str:
    """7,006 or 0.35: a series' newest value, exact."""
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:,.3g}"


def value_ticks(largest: float, integer: bool) -> list[float]:
    """0 and at most Y_TICKS round steps up to `largest` or just above it; whole steps when
    the values are counts (`integer`); [0, 1] when everything is 0."""
    if largest <= 0:
        return [0.0, 1.0]
    raw = largest / Y_TICKS
    magnitude = 10.0 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw * (1 - 1e-9))
    if integer and not float(step).is_integer():
        step = 1.0 if step < 1 else 5 * magnitude  # 2.5 -> 5: no half messages
    count = math.ceil(largest / step - 1e-9)
    return [round(i * step, 10) for i in range(count + 1)]


def duration_text(seconds: float) -> str:
    """4 s, 24 min, 3 h 5 min, 2 d 4 h."""
    s = round(seconds)
    if s < 120:
        return f"{s} s"
    if s < 7200:
        return f"{round(s / 60)} min"
    if s < 2 * 86400:
        h, m = divmod(round(s / 60), 60)
        return f"{h} h {m} min" if m else f"{h} h"
    d, h = divmod(round(s / 3600), 24)
    return f"{d} d {h} h" if h else f"{d} d"


def typical_interval(times: Sequence[float]) -> float:
    """The median time between the chart's snapshots (infinite with fewer than two)."""
    steps = [b - a for a, b in itertools.pairwise(times)]
    return statistics.median(steps) if steps else math.inf


@dataclasses.dataclass(frozen=True)
class Stretch:
    """Snapshots from t0 to t1 (epoch seconds) drawn linearly from x0 to x1."""

    t0: float
    t1: float
    x0: float
    x1: float

    def x(self, t: float) -> float:
        if self.t1 <= self.t0:
            return (self.x0 + self.x1) / 2
        return self.x0 + (t - self.t0) / (self.t1 - self.t0) * (self.x1 - self.x0)


@dataclasses.dataclass(frozen=True)
class TimeAxis:
    times: list[float]  # the chart's snapshot times, sorted, distinct
    hole: float  # neighbouring snapshots further apart than this have a hole between them
    stretches: list[Stretch]

    def stretch_of(self, t: float) -> Stretch:
        for s in self.stretches:
            if t <= s.t1:
                return s
        return self.stretches[-1]

    def x(self, t: float) -> float:
        return self.stretch_of(t).x(t)

    def holes(self) -> list[tuple[float, float]]:
        return [(a, b) for a, b in itertools.pairwise(self.times) if b - a > self.hole]

    def joined(self, a: float, b: float) -> bool:
        """A series' points at a and b are drawn joined: neighbours among the chart's
        snapshots, with no hole between them."""
        i, j = bisect.bisect_left(self.times, a), bisect.bisect_left(self.times, b)
        return j - i <= 1 and b - a <= self.hole


def time_axis(times: Sequence[float], left: float, width: float) -> TimeAxis:
    """The stretches of `times` (sorted, distinct): holes longer than CUT_SHARE of the span
    are cut out; each stretch gets MIN_STRETCH_PX and a share of the rest by its length."""
    hole = GAP_FACTOR * typical_interval(times)
    span = times[-1] - times[0]
    groups: list[list[float]] = [[times[0]]]
    for a, b in itertools.pairwise(times):
        if b - a > hole and b - a > CUT_SHARE * span:
            groups.append([])
        groups[-1].append(b)
    available = width - BREAK_PX * (len(groups) - 1)
    minimum = min(MIN_STRETCH_PX, available / len(groups))
    lengths = [g[-1] - g[0] for g in groups]
    total = sum(lengths)
    stretches, x = [], left
    for g, length in zip(groups, lengths, strict=True):
        share = (length / total if total else 1 / len(groups)) * (available - minimum *
                                                                   len(groups))
        stretches.append(Stretch(g[0], g[-1], x, x + minimum + share))
        x += minimum + share + BREAK_PX
    return TimeAxis(list(times), hole, stretches)


def time_ticks(stretch: Stretch) -> tuple[list[float], int]:
    """Round times within the stretch, at least TICK_PX apart, and their step (s); a stretch
    of one snapshot, or too short for any round time, is marked at its start."""
    length = stretch.t1 - stretch.t0
    most = max(1.0, (stretch.x1 - stretch.x0) / TICK_PX)  # intervals between ticks
    step = next((s for s in TIME_STEPS if length / s <= most), TIME_STEPS[-1])
    first = math.ceil(stretch.t0 / step - 1e-9) * step
    ticks = [float(t) for t in range(int(first), int(stretch.t1) + 1, step)
             if stretch.t0 - 1e-6 <= t <= stretch.t1 + 1e-6]
    return (ticks or [stretch.t0]), (step if ticks else 1)


def time_label(t: float, step: int) -> str:
    when = dt.datetime.fromtimestamp(t, dt.UTC)
    if step >= 86400:
        return f"{when:%b %d}"
    return f"{when:%H:%M}" if step >= 60 and when.second == 0 else f"{when:%H:%M:%S}"


def colour_of(name: str) -> str:
    """A series' colour from its name, so a group keeps its colour from page to page."""
    return PALETTE[zlib.crc32(name.encode()) % len(PALETTE)]


def segments(ordered: Sequence[Point], axis: TimeAxis) -> list[list[Point]]:
    """The series' points (sorted by time) in pieces drawn joined (TimeAxis.joined)."""
    pieces: list[list[Point]] = []
    for point in ordered:
        if not pieces or not axis.joined(pieces[-1][-1][0].timestamp(), point[0].timestamp()):
            pieces.append([])
        pieces[-1].append(point)
    return pieces


def line_chart(title: str, series: dict[str, Sequence[Point]], y_label: str) -> str:
    """An SVG chart with one line per series (time on x), its legend with each series'
    newest value on the right."""
    points = [p for s in series.values() for p in s]
    esc = html.escape
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" width="{WIDTH}" '
             f'height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" '
             f'aria-label="{esc(title)}">',
             f'<text x="{LEFT}" y="18" class="title">{esc(title)}</text>']
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    bottom = TOP + plot_h
    if not points:
        parts.append(f'<text x="{LEFT}" y="{TOP + plot_h / 2}">no data</text></svg>')
        return "".join(parts)
    axis = time_axis(sorted({p[0].timestamp() for p in points}), LEFT, plot_w)
    ticks = value_ticks(max(p[1] for p in points), all(float(p[1]).is_integer()
                                                        for p in points))
    y_max = ticks[-1]

    def y(v: float) -> float:
        return bottom - v / y_max * plot_h

    for a, b in axis.holes():  # no snapshot at all: shaded, or cut out and labelled
        sa, sb = axis.stretch_of(a), axis.stretch_of(b)
        x0, x1 = sa.x(a), sb.x(b)
        what = f"no snapshots for {duration_text(b - a)}"
        cut = sa is not sb
        parts.append(f'<rect x="{x0:.1f}" y="{TOP}" width="{x1 - x0:.1f}" height="{plot_h}" '
                     f'class="{"cut" if cut else "hole"}"><title>{what}</title></rect>')
        if cut:
            cx = (x0 + x1) / 2
            parts.append(f'<text x="{cx:.1f}" y="{TOP + plot_h / 2:.1f}" class="cut-label" '
                         f'transform="rotate(-90 {cx:.1f} {TOP + plot_h / 2:.1f})" '
                         f'text-anchor="middle" dy="4">{what}</text>')
    for v in ticks:
        parts.append(f'<line x1="{LEFT}" x2="{LEFT + plot_w}" y1="{y(v):.1f}" y2="{y(v):.1f}" '
                     f'class="grid"/><text x="{LEFT - 6}" y="{y(v) + 4:.1f}" '
                     f'text-anchor="end">{axis_label(v)}</text>')
    last_label = -math.inf
    for stretch in axis.stretches:
        stamps, step = time_ticks(stretch)
        for t in stamps:
            x = stretch.x(t)
            parts.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{bottom}" y2="{bottom + 4}" '
                         'class="axis"/>')
            if x - last_label >= LABEL_PX:
                parts.append(f'<text x="{x:.1f}" y="{bottom + 16}" text-anchor="middle">'
                             f'{time_label(t, step)}</text>')
                last_label = x
    first, last = (dt.datetime.fromtimestamp(t, dt.UTC) for t in (axis.times[0],
                                                                  axis.times[-1]))
    days = f"{first:%Y-%m-%d}" + (f" to {last:%Y-%m-%d}" if last.date() != first.date()
                                  else "")
    parts.append(f'<text x="{LEFT + plot_w / 2}" y="{bottom + 34}" text-anchor="middle" '
                 f'class="caption">time (UTC), {days}; {len(axis.times)} snapshot(s)</text>')
    parts.append(f'<text x="14" y="{TOP + plot_h / 2}" transform="rotate(-90 14 '
                 f'{TOP + plot_h / 2})" text-anchor="middle">{esc(y_label)}</text>')
    parts.append(f'<line x1="{LEFT}" x2="{LEFT}" y1="{TOP}" y2="{bottom}" class="axis"/>'
                 f'<line x1="{LEFT}" x2="{LEFT + plot_w}" y1="{bottom}" y2="{bottom}" '
                 'class="axis"/>')
    for n, (name, values) in enumerate(series.items()):
        colour = colour_of(name)
        ordered = sorted(values)
        for piece in segments(ordered, axis):
            path = " ".join(f"{axis.x(t.timestamp()):.1f},{y(v):.1f}" for t, v in piece)
            parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2" '
                         f'points="{path}"><title>{esc(name)}</title></polyline>')
            if len(piece) == 1:
                t, v = piece[0]
                parts.append(f'<circle cx="{axis.x(t.timestamp()):.1f}" cy="{y(v):.1f}" r="3" '
                             f'fill="{colour}"/>')
        ly = TOP + 14 * n + 6
        newest = legend_value(ordered[-1][1]) if ordered else "-"
        parts.append(f'<rect x="{WIDTH - RIGHT + 12}" y="{ly - 8}" width="10" height="10" '
                     f'fill="{colour}"/><text x="{WIDTH - RIGHT + 26}" y="{ly + 1}">'
                     f'<title>{esc(name)}</title>{esc(name[:20])}</text>'
                     f'<text x="{WIDTH - 8}" y="{ly + 1}" text-anchor="end">{newest}</text>')
    parts.append("</svg>")
    return "".join(parts)
