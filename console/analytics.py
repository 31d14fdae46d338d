"""The lag analytics' tables (spark_analytics.lag's Parquet outputs under --analytics DIR),
read with pyarrow (no JVM): Burrow-style statuses per group and the lag history of a group,
charted as server-side SVG with matplotlib (which ships everything it needs)."""

from __future__ import annotations

import io
import threading
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

GROUP_STATUS = "group_status"
GROUP_LAG = "group_lag"
HISTORY_POINTS = 500
STATUS_COLUMNS = ("cluster", "group", "topic_kind", "status", "snapshot_time", "queues",
                  "message_lag_sum", "time_lag_max_s", "worst_topic", "worst_broker_name",
                  "worst_queue_id")
_chart_lock = threading.Lock()  # pyplot's state is global


class AnalyticsTables:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._cache: dict[str, tuple[float, list[dict[str, Any]]]] = {}

    def _table(self, name: str) -> list[dict[str, Any]]:
        """The table's rows, read again only when its files changed."""
        path = self.directory / name
        files = list(path.rglob("*.parquet")) if path.is_dir() else []
        if not files:
            return []
        stamp = max(f.stat().st_mtime for f in files)
        cached = self._cache.get(name)
        if cached is not None and cached[0] == stamp:
            return cached[1]
        rows = pq.read_table(path).to_pylist()
        self._cache[name] = (stamp, rows)
        return rows

    def available(self) -> bool:
        return (self.directory / GROUP_STATUS).is_dir()

    def group_statuses(self) -> list[dict[str, Any]]:
        rows = self._table(GROUP_STATUS)
        return sorted(({k: r.get(k) for k in STATUS_COLUMNS} for r in rows),
                      key=lambda r: (str(r["cluster"]), str(r["group"]), str(r["topic_kind"])))

    def status_of(self, group: str) -> list[dict[str, Any]]:
        return [r for r in self.group_statuses() if r["group"] == group]

    def history_of(self, group: str) -> list[dict[str, Any]]:
        rows = [r for r in self._table(GROUP_LAG) if r.get("group") == group]
        normal = [r for r in rows if r.get("topic_kind") == "normal"]
        rows = normal or rows  # the group's own topics, not its retry / DLQ topics
        rows.sort(key=lambda r: r["snapshot_time"])
        return rows[-HISTORY_POINTS:]


def history_svg(rows: list[dict[str, Any]], title: str) -> str:
    """Message lag (left axis) and time lag (right axis) over time, as an SVG document."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    with _chart_lock:
        fig = Figure(figsize=(8, 2.6), dpi=96)
        ax = fig.subplots()
        times = [r["snapshot_time"] for r in rows]
        ax.plot(times, [r.get("message_lag_sum") or 0 for r in rows], color="#1f5fa8",
                label="message lag")
        ax.set_ylabel("messages")
        ax2 = ax.twinx()
        ax2.plot(times, [r.get("time_lag_max_s") or 0 for r in rows], color="#c0392b",
                 label="time lag (s)")
        ax2.set_ylabel("seconds")
        ax.set_title(title, fontsize=10)
        fig.autofmt_xdate()
        fig.tight_layout()
        out = io.StringIO()
        fig.savefig(out, format="svg")
        return out.getvalue()
