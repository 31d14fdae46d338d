"""Compaction of the snapshot table (no JVM): hours older than the limit become one file
each with the same rows, while a reader reading all along sees every row once (or, having
listed the files just before a swap, fails to open one and reads again)."""

from __future__ import annotations

import datetime as dt
import threading
from pathlib import Path

import pyarrow.parquet as pq

from spark_analytics import compact, incremental
from spark_analytics.schema import SNAPSHOTS_DIR
from tests.spark_analytics.snapshots import T0, broker, queue, write_snapshots

PER_HOUR = 12


def history(directory: Path) -> int:
    rows = []
    for h in range(3):
        for i in range(PER_HOUR):
            when = T0 + dt.timedelta(hours=h, minutes=5 * i)
            for r in (queue(0, "G", "T", 0, 100 + i, 90), broker(0, "broker-a")):
                r["snapshot_time"] = when
                rows.append(r)
    write_snapshots(directory, rows)
    return len(rows)


def rows_sorted(path: Path) -> list[tuple]:
    table = pq.ParquetDataset(path).read()
    return sorted((tuple(sorted(r.items())) for r in table.to_pylist()), key=repr)


def test_compaction_under_a_concurrent_reader(tmp_path: Path) -> None:
    total = history(tmp_path)
    snapshots = tmp_path / SNAPSHOTS_DIR
    before = rows_sorted(snapshots)
    seen: list[int] = []
    retried: list[str] = []
    done = threading.Event()

    def reader() -> None:
        while not done.is_set():
            try:
                seen.append(pq.ParquetDataset(snapshots).read(["snapshot_time"]).num_rows)
            except FileNotFoundError as e:  # listed before a swap: read again
                retried.append(str(e))

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        # two hours ended more than a day before `now`; the third not yet
        now = T0 + dt.timedelta(hours=2, minutes=30) + dt.timedelta(days=1)
        written = compact.compact(snapshots, dt.timedelta(days=1), now=now)
    finally:
        done.set()
        thread.join(timeout=30)
    assert seen and set(seen) == {total}, (set(seen), retried[:3])
    assert [p.name for p in written] == [
        f"compacted-{incremental.file_time_range(p)[0]}-{incremental.file_time_range(p)[1]}"
        ".parquet" for p in written]
    files = incremental.snapshot_files(snapshots)
    assert len(files) == 2 + PER_HOUR  # two compacted hours, the third as it was
    assert rows_sorted(snapshots) == before
    # the lag job's incremental runs skip compacted hours by name
    newest_compacted = max(incremental.file_time_range(p)[1] for p in written)
    assert incremental.files_after(files, newest_compacted) == files[2:]
    assert list(snapshots.glob("date=*/.trash-*"))  # kept for readers until next time
    assert compact.compact(snapshots, dt.timedelta(days=1), now=now) == []
    assert not list(snapshots.glob("date=*/.trash-*"))
    assert compact.main(["--in", str(tmp_path / "missing")]) == 1
