"""Compaction of the snapshot table: `python -m spark_analytics.compact --in DIR
[--older-than-hours 24]`. The collector writes one small file per snapshot (a month of
one a minute: 43,200 files); each hour directory older than the limit is rewritten as one
file, `compacted-FIRSTMS-LASTMS.parquet` (the snapshot times it covers: the lag job's
incremental runs skip it by its name when it is older than their watermark).

A reader never sees half a compaction: the new hour directory is written aside (hidden
name) and swapped with the old one by one atomic renameat2(RENAME_EXCHANGE) (publish.py);
the old files stay as `.trash-*` beside it until the next compaction, so a reader that
listed them can still open them. No JVM (pyarrow)."""

from __future__ import annotations

import argparse
import datetime as dt
import os
import shutil
import sys
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from spark_analytics.incremental import file_time_range
from spark_analytics.publish import exchange
from spark_analytics.schema import SNAPSHOTS_DIR, arrow_schema

PROG = "spark_analytics.compact"
DEFAULT_OLDER_THAN_HOURS = 24.0
_WORK_PREFIX = ".compacting-"
_TRASH_PREFIX = ".trash-"


def hour_start(hour_dir: Path) -> dt.datetime | None:
    """The start of an hour directory `date=YYYY-MM-DD/hour=HH` (None if not one)."""
    try:
        date = hour_dir.parent.name.removeprefix("date=")
        hour = int(hour_dir.name.removeprefix("hour="))
        return dt.datetime.strptime(date, "%Y-%m-%d").replace(hour=hour, tzinfo=dt.UTC)
    except ValueError:
        return None


def visible_files(hour_dir: Path) -> list[Path]:
    return sorted(p for p in hour_dir.glob("*.parquet") if not p.name.startswith((".", "_")))


def compact_hour(hour_dir: Path) -> Path | None:
    """Rewrites one hour directory's files as one; returns the new file (None when it
    holds one file already, or none, or a file whose name gives no snapshot times)."""
    files = visible_files(hour_dir)
    spans = [file_time_range(f) for f in files]
    if len(files) < 2 or any(s is None for s in spans):
        return None
    first = min(s[0] for s in spans if s)
    last = max(s[1] for s in spans if s)
    schema = arrow_schema()
    table = pa.concat_tables(pq.read_table(f, schema=schema) for f in files)
    table = table.sort_by([("snapshot_time", "ascending")])
    work = hour_dir.with_name(f"{_WORK_PREFIX}{hour_dir.name}-{uuid.uuid4().hex[:8]}")
    work.mkdir()
    target = work / f"compacted-{first}-{last}.parquet"
    pq.write_table(table, target, row_group_size=1 << 20)
    with open(target, "rb") as f:
        os.fsync(f.fileno())
    trash = hour_dir.with_name(f"{_TRASH_PREFIX}{hour_dir.name}-{uuid.uuid4().hex[:8]}")
    if exchange(work, hour_dir):
        os.rename(work, trash)
    else:  # no atomic exchange here: the hour is briefly absent, never half written
        os.rename(hour_dir, trash)
        os.rename(work, hour_dir)
    return hour_dir / target.name


def compact(snapshots: Path, older_than: dt.timedelta, now: dt.datetime | None = None
            ) -> list[Path]:
    """Compacts every hour directory that ended more than `older_than` ago; removes the
    trash of earlier compactions first. Returns the files written."""
    now = now or dt.datetime.now(dt.UTC)
    for stale in snapshots.glob(f"date=*/{_TRASH_PREFIX}*"):
        shutil.rmtree(stale, ignore_errors=True)
    for stale in snapshots.glob(f"date=*/{_WORK_PREFIX}*"):
        shutil.rmtree(stale, ignore_errors=True)
    written = []
    for hour_dir in sorted(snapshots.glob("date=*/hour=*")):
        start = hour_start(hour_dir)
        if start is None or start + dt.timedelta(hours=1) > now - older_than:
            continue
        if (new := compact_hour(hour_dir)) is not None:
            written.append(new)
    return written


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    parser.add_argument("--in", dest="in_dir", required=True, type=Path,
                        help="the collector's --out (or its snapshots/ directory)")
    parser.add_argument("--older-than-hours", type=float, default=DEFAULT_OLDER_THAN_HOURS,
                        help="compact hours that ended longer ago than this (default "
                        "%(default)s)")
    args = parser.parse_args(argv)
    if args.older_than_hours < 0:
        parser.error("--older-than-hours must be at least 0")
    snapshots = args.in_dir / SNAPSHOTS_DIR
    if not snapshots.is_dir():
        snapshots = args.in_dir
    if not snapshots.is_dir():
        print(f"{PROG}: --in {args.in_dir}: no such directory", file=sys.stderr)
        return 1
    started = time.monotonic()
    try:
        written = compact(snapshots, dt.timedelta(hours=args.older_than_hours))
    except (OSError, pa.ArrowException) as e:
        print(f"{PROG}: {e}", file=sys.stderr)
        return 1
    print(f"{PROG}: {len(written)} hours compacted in {time.monotonic() - started:.1f} s",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
