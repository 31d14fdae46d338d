"""The lag report for people: `python -m spark_analytics.report --in OUT [--html FILE]`.

Reads the lag job's output tables under OUT with pyarrow (no JVM) and prints a terminal
table of the worst groups, queues and slaves, with statuses; with --html also writes one
self-contained page (inline SVG charts, no scripts, no network): lag per group and
fall-behind per slave over time, statuses coloured.
"""

from __future__ import annotations

import argparse
import datetime as dt
import html
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from mqclient.cli.errors import stdout_closed
from spark_analytics import constants as C
from spark_analytics.charts import human, line_chart
from spark_analytics.incremental import committed_files, read_manifest

PROG = "mqlagreport"  # its console script (python -m spark_analytics.report too)
TOP_GROUPS = 10
TOP_QUEUES = 10
CHART_GROUPS = 8
STATUS_COLOURS = {C.STATUS_OK: "#2e7d32", C.STATUS_WARN: "#f9a825", C.STATUS_STOP: "#c62828",
                  C.STATUS_STALL: "#ef6c00", C.STATUS_REWIND: "#6a1b9a"}
Row = dict[str, Any]


def read_table(out: Path, name: str) -> list[Row]:
    """The rows of one output table ([] when the job has not written it): the runs its
    manifest records (not those of a run cut short)."""
    path = out / name
    if not path.is_dir():
        return []
    rows: list[Row] = []
    for f in committed_files(path, read_manifest(out)):
        rows += pq.read_table(f).to_pylist()
    return rows


class Report:
    """The figures the report shows, picked from the job's outputs."""

    def __init__(self, out: Path) -> None:
        self.group_status = sorted(
            read_table(out, C.GROUP_STATUS),
            key=lambda r: (-r["status_severity"], -(r["message_lag_sum"] or 0), r["group"]))
        self.queue_status = sorted(
            read_table(out, C.QUEUE_STATUS),
            key=lambda r: (-r["status_severity"], -(r["message_lag"] or 0), r["group"]))
        self.group_lag = read_table(out, C.GROUP_LAG)
        self.slaves = read_table(out, C.SLAVE_FALL_BEHIND)
        self.brokers = read_table(out, C.BROKER_HEALTH)

    @property
    def worst_groups(self) -> list[Row]:
        return self.group_status[:TOP_GROUPS]

    @property
    def worst_queues(self) -> list[Row]:
        return self.queue_status[:TOP_QUEUES]

    def newest(self, rows: list[Row]) -> list[Row]:
        if not rows:
            return []
        newest = max(r["snapshot_time"] for r in rows)
        return [r for r in rows if r["snapshot_time"] == newest]

    @property
    def current_slaves(self) -> list[Row]:
        return sorted(self.newest(self.slaves),
                      key=lambda r: (-(r["fall_behind_bytes"] or 0), r["broker_name"],
                                     r["slave_id"]))

    @property
    def unreachable(self) -> list[Row]:
        return [r for r in self.newest(self.brokers) if not r["reachable"]]

    def group_series(self) -> dict[str, list[tuple[dt.datetime, float]]]:
        """Message lag over time of the groups worst now (normal topics)."""
        names = [r["group"] for r in self.group_status
                 if r["topic_kind"] == C.TOPIC_KIND_NORMAL][:CHART_GROUPS]
        series: dict[str, list[tuple[dt.datetime, float]]] = {n: [] for n in names}
        for r in self.group_lag:
            if r["topic_kind"] == C.TOPIC_KIND_NORMAL and r["group"] in series:
                series[r["group"]].append((r["snapshot_time"], float(r["message_lag_sum"])))
        return series

    def slave_series(self, column: str) -> dict[str, list[tuple[dt.datetime, float]]]:
        series: dict[str, list[tuple[dt.datetime, float]]] = {}
        for r in self.slaves:
            name = f"{r['broker_name']}/{r['slave_id']}"
            values = series.setdefault(name, [])
            if r[column] is not None:
                values.append((r["snapshot_time"], float(r[column])))
        return series


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.1f}"
    if isinstance(value, int) and not isinstance(value, bool):
        return human(value) if abs(value) >= 100_000 else str(value)
    if isinstance(value, dt.datetime):
        return f"{value:%Y-%m-%d %H:%M:%S}"
    return str(value)


GROUP_COLUMNS = (("status", "status"), ("group", "group"), ("kind", "topic_kind"),
                 ("queues", "queues"), ("lag msgs", "message_lag_sum"),
                 ("max s", "time_lag_max_s"), ("worst topic", "worst_topic"),
                 ("broker", "worst_broker_name"), ("queue", "worst_queue_id"))
QUEUE_COLUMNS = (("status", "status"), ("group", "group"), ("topic", "topic"),
                 ("broker", "broker_name"), ("queue", "queue_id"), ("lag msgs", "message_lag"),
                 ("lag s", "time_lag_s"), ("time by", "time_lag_method"),
                 ("offset", "consumer_offset"), ("commit age s", "commit_age_s"))
SLAVE_COLUMNS = (("broker", "broker_name"), ("slave", "slave_id"),
                 ("behind bytes", "fall_behind_bytes"), ("from", "fall_behind_bytes_from"),
                 ("behind s", "fall_behind_seconds"), ("in sync", "in_sync"),
                 ("link", "link_state"), ("cross-check", "cross_check_bytes"))
BROKER_COLUMNS = (("broker", "broker_name"), ("id", "broker_id"), ("addr", "broker_addr"),
                  ("error", "error"))


def text_table(title: str, rows: Sequence[Row], columns: Sequence[tuple[str, str]]) -> str:
    cells = [[_fmt(r[key]) for _, key in columns] for r in rows]
    widths = [max([len(head)] + [len(c[i]) for c in cells]) for i, (head, _) in
              enumerate(columns)]
    lines = [title, "  ".join(h.ljust(w) for (h, _), w in zip(columns, widths, strict=True))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(cell, widths, strict=True))
              for cell in cells] or ["(none)"]
    return "\n".join(lines)


def terminal_report(report: Report) -> str:
    parts = [text_table("Worst groups (status over the last snapshots):", report.worst_groups,
                        GROUP_COLUMNS),
             text_table("Worst queues:", report.worst_queues, QUEUE_COLUMNS),
             text_table("Slaves (newest snapshot):", report.current_slaves, SLAVE_COLUMNS)]
    if report.unreachable:
        parts.append(text_table("Brokers that did not answer (newest snapshot):",
                                report.unreachable, BROKER_COLUMNS))
    return "\n\n".join(parts) + "\n"


PAGE_STYLE = """
body { font-family: sans-serif; margin: 24px; color: #222; }
h1 { font-size: 22px; } h2 { font-size: 17px; margin-top: 28px; }
table { border-collapse: collapse; font-size: 13px; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: left; }
th { background: #f0f0f0; }
.status { color: #fff; font-weight: bold; border-radius: 3px; padding: 1px 6px; }
svg.chart { border: 1px solid #ddd; margin: 8px 16px 8px 0; font-size: 11px; }
svg .title { font-size: 13px; font-weight: bold; }
svg .grid { stroke: #eee; } svg .axis { stroke: #888; }
svg .hole { fill: #f4f4f4; } svg .cut { fill: #e4e4e4; stroke: #aaa; stroke-dasharray: 3 3; }
svg .cut-label { fill: #555; font-size: 10px; } svg .caption { fill: #666; }
.legend span { margin-right: 12px; }
"""


def _html_table(rows: Sequence[Row], columns: Sequence[tuple[str, str]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h, _ in columns)
    body = []
    for r in rows:
        cells = []
        for _, key in columns:
            if key == "status":
                colour = STATUS_COLOURS.get(r[key], "#555")
                cells.append(f'<td><span class="status" style="background:{colour}">'
                             f"{html.escape(str(r[key]))}</span></td>")
            else:
                cells.append(f"<td>{html.escape(_fmt(r[key]))}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><tr>{head}</tr>{''.join(body) or '<tr><td>(none)</td></tr>'}</table>"


def html_report(report: Report, source: Path) -> str:
    legend = "".join(f'<span class="status" style="background:{c}">{s}</span> '
                     for s, c in STATUS_COLOURS.items())
    charts = [line_chart("Message lag per group over time (normal topics)",
                         report.group_series(), "messages"),
              line_chart("Fall-behind per slave over time", report.slave_series(
                  "fall_behind_bytes"), "bytes"),
              line_chart("Fall-behind per slave over time (seconds)", report.slave_series(
                  "fall_behind_seconds"), "seconds")]
    unreachable = ""
    if report.unreachable:
        unreachable = ("<h2>Brokers that did not answer</h2>"
                       + _html_table(report.unreachable, BROKER_COLUMNS))
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Consumer lag and fall-behind</title>
<style>{PAGE_STYLE}</style></head><body>
<h1>Consumer lag and fall-behind</h1>
<p>From {html.escape(str(source))}. Statuses: <span class="legend">{legend}</span></p>
<h2>Worst groups</h2>{_html_table(report.worst_groups, GROUP_COLUMNS)}
<h2>Over time</h2>{''.join(charts)}
<h2>Worst queues</h2>{_html_table(report.worst_queues, QUEUE_COLUMNS)}
<h2>Slaves</h2>{_html_table(report.current_slaves, SLAVE_COLUMNS)}
{unreachable}
</body></html>
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    parser.add_argument("--in", dest="in_dir", required=True, type=Path,
                        help="the lag job's --out")
    parser.add_argument("--html", type=Path, help="also write the HTML page here")
    args = parser.parse_args(argv)
    if not (args.in_dir / C.GROUP_STATUS).is_dir():
        print(f"{PROG}: no lag job outputs under {args.in_dir} (run spark_analytics.lag)",
              file=sys.stderr)
        return 1
    report = Report(args.in_dir)
    try:
        sys.stdout.write(terminal_report(report))
        sys.stdout.flush()
    except BrokenPipeError:  # `mqlagreport --in DIR | head`: the reader had enough
        return stdout_closed()
    if args.html:
        args.html.parent.mkdir(parents=True, exist_ok=True)
        args.html.write_text(html_report(report, args.in_dir), encoding="utf-8")
        print(f"\nHTML report: {args.html.resolve()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
