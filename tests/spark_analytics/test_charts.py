"""The report's SVG charts: value ticks, round time ticks, holes and cut-out stretches
without snapshots, read from the SVG the report embeds (no browser)."""

from __future__ import annotations

import datetime as dt
import re

import pytest

from spark_analytics.charts import (
    LEFT,
    RIGHT,
    WIDTH,
    axis_label,
    duration_text,
    line_chart,
    value_ticks,
)

PLOT_W = WIDTH - LEFT - RIGHT
T0 = dt.datetime(2026, 11, 26, 21, 3, 17, 400_000, tzinfo=dt.UTC)


def at(seconds: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


def polylines(svg: str, name: str) -> list[list[tuple[float, float]]]:
    return [[tuple(map(float, xy.split(","))) for xy in points.split()]  # type: ignore[misc]
            for points in re.findall(rf'<polyline [^>]*points="([^"]*)"><title>{name}</title>',
                                     svg)]


def value_labels(svg: str) -> list[str]:
    return re.findall(r'text-anchor="end">([^<]*)</text>', svg.split("<polyline")[0])


def time_labels(svg: str) -> list[tuple[float, str]]:
    return [(float(x), text) for x, text in re.findall(
        r'<text x="([\d.]+)" y="\d+" text-anchor="middle">(\d\d:\d\d(?::\d\d)?)</text>', svg)]


@pytest.mark.parametrize(("largest", "integer", "ticks"), [
    (0, True, [0, 1]),  # all zero: 0 and 1, not 0.2 ... 1 bytes
    (0, False, [0, 1]),
    (3, True, [0, 1, 2, 3]),
    (2.2, True, [0, 1, 2, 3]),
    (12, True, [0, 5, 10, 15]),  # whole steps: not 2.5
    (100, True, [0, 20, 40, 60, 80, 100]),
    (7006, True, [0, 2000, 4000, 6000, 8000]),
    (0.35, False, [0, 0.1, 0.2, 0.3, 0.4]),
    (12, False, [0, 2.5, 5, 7.5, 10, 12.5]),
])
def test_value_ticks_are_round_steps_from_zero(largest: float, integer: bool,
                                               ticks: list[float]) -> None:
    assert value_ticks(largest, integer) == pytest.approx(ticks)


def test_labels() -> None:
    assert [axis_label(v) for v in (0, 0.1 + 0.2, 2.5, 250, 2500, 8000, 12_500, 1.25e6)] == [
        "0", "0.3", "2.5", "250", "2.5k", "8k", "12.5k", "1.25M"]
    assert [duration_text(s) for s in (4, 119, 24 * 60 + 7, 3 * 3600 + 300, 2 * 86400)] == [
        "4 s", "119 s", "24 min", "3 h 5 min", "2 d"]


def test_an_all_zero_chart_is_labelled_0_and_1() -> None:
    svg = line_chart("fall-behind", {"broker-a/1": [(at(2 * i), 0.0) for i in range(3)]},
                     "bytes")
    assert value_labels(svg) == ["0", "1"]


def test_time_ticks_fall_on_round_times_evenly_spaced() -> None:
    """An hour of snapshots every 10 s from 21:03:17.4: ticks every 10 minutes at :10, :20
    ..., equally far apart (they were at 21:03:17, 21:13:15, 21:23:14 ...)."""
    svg = line_chart("lag", {"g": [(at(10 * i), float(i)) for i in range(360)]}, "messages")
    labels = time_labels(svg)
    assert [text for _, text in labels] == ["21:10", "21:20", "21:30", "21:40", "21:50",
                                            "22:00"]
    gaps = [b - a for (a, _), (b, _) in zip(labels, labels[1:], strict=False)]
    assert max(gaps) - min(gaps) < 0.2
    # A few seconds: whole seconds, labelled with them.
    short = time_labels(line_chart("lag", {"g": [(at(2 * i), 1.0) for i in range(3)]}, "x"))
    assert [text for _, text in short] == ["21:03:18", "21:03:19", "21:03:20", "21:03:21"]


def test_two_runs_minutes_apart_each_get_a_share_of_the_width() -> None:
    """Two `make run`s 24 minutes apart, 3 snapshots 2 s apart each; OpsGroup only in the
    second: its 7,006 messages of lag were a 1.4-pixel line at the right edge. The 24
    minutes without snapshots are cut out, drawn as a band that says so."""
    later = 24 * 60 + 7.3
    svg = line_chart("lag", {
        "OpsGroup": [(at(later + 2 * i), 7006.0) for i in range(3)],
        "DemoGroup": [(at(2 * i), 100.0) for i in range(3)]
        + [(at(later + 2 * i), 100.0) for i in range(3)]}, "messages")
    [ops] = polylines(svg, "OpsGroup")
    assert ops[-1][0] - ops[0][0] > 0.3 * PLOT_W
    demo = polylines(svg, "DemoGroup")
    assert len(demo) == 2  # not joined across the 24 minutes
    assert demo[0][-1][0] - demo[0][0][0] > 0.3 * PLOT_W
    assert "no snapshots for 24 min" in svg and 'class="cut"' in svg
    labels = [text for _, text in time_labels(svg)]
    assert labels[0].startswith("21:03:") and labels[-1].startswith("21:27:"), labels


def test_a_value_missing_at_a_snapshot_leaves_a_hole() -> None:
    """broker-b/1 has no value at one snapshot where broker-a/1 has one (its master did not
    answer once): its line is broken there, not drawn across."""
    steady = [(at(10 * i), 1.0) for i in range(10)]
    holed = [p for i, p in enumerate(steady) if i != 5]
    svg = line_chart("fall-behind", {"broker-a/1": steady, "broker-b/1": holed}, "bytes")
    assert len(polylines(svg, "broker-a/1")) == 1
    assert [len(piece) for piece in polylines(svg, "broker-b/1")] == [5, 4]


def test_a_pause_of_the_collector_is_shaded_not_crossed() -> None:
    """No snapshot at all for 3 minutes within an hour: lines break there and the stretch is
    shaded (short against the hour: kept on the time scale, not cut out)."""
    times = [10 * i for i in range(360) if not 100 <= i < 118]
    svg = line_chart("lag", {"g": [(at(t), 5.0) for t in times]}, "messages")
    assert len(polylines(svg, "g")) == 2
    assert 'class="hole"' in svg and "no snapshots for 3 min" in svg
    assert 'class="cut"' not in svg


def test_the_legend_says_each_series_newest_value() -> None:
    svg = line_chart("lag", {"OpsGroup": [(at(0), 7000.0), (at(2), 7006.0)]}, "messages")
    assert re.search(r'text-anchor="end">7,006</text>', svg)
