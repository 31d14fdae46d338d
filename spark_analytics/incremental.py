"""What the lag job has processed, kept beside its outputs, so that a run reads only the
snapshots that arrived since the last one and a crash mid-run is repeated, never counted
twice (docs/lag-analytics.md "Incremental runs").

Layout under --out:
- the per-snapshot tables (APPENDED_TABLES) hold one directory per run, `run-NNNNNN/`; a
  run writes its rows into `_run-NNNNNN/` (hidden from Spark and pyarrow: leading
  underscore) and renames it visible only once every table is written;
- the current-state tables (REPLACED_TABLES) are swapped whole (publish.py);
- `_lag_manifest.json`, written (aside, then renamed) only after all of that: the last run
  committed and the newest snapshot time it covered (the watermark).

A run whose manifest is missing (never run, or a full run cut short) recomputes everything.
At the start of a run, run directories newer than the manifest's (a run cut short after
some renames) and hidden ones are removed: that run is repeated.
No Spark here: the job decides which files to read before it starts a JVM."""

from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

MANIFEST = "_lag_manifest.json"
MANIFEST_VERSION = 1
RUN_DIR = re.compile(r"^_?run-(\d{6,})$")
# Snapshot files as the collector names them; compacted files cover a range of snapshots.
SNAPSHOT_FILE = re.compile(r"^snapshot-(\d+)\.parquet$")
COMPACTED_FILE = re.compile(r"^compacted-(\d+)-(\d+)\.parquet$")


def run_dir_name(run: int, hidden: bool = False) -> str:
    return f"{'_' if hidden else ''}run-{run:06d}"


@dataclass(frozen=True)
class Manifest:
    run: int  # the last committed run
    watermark_ms: int  # its newest snapshot time (epoch ms): later snapshots are new
    window: int

    def to_json(self) -> str:
        return json.dumps({"version": MANIFEST_VERSION, "run": self.run,
                           "watermark_ms": self.watermark_ms, "window": self.window})


def read_manifest(out: Path) -> Manifest | None:
    """The last committed run, or None (no manifest, or one this version cannot read)."""
    try:
        data = json.loads((out / MANIFEST).read_text())
        if data.get("version") != MANIFEST_VERSION:
            return None
        return Manifest(int(data["run"]), int(data["watermark_ms"]), int(data["window"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def write_manifest(out: Path, manifest: Manifest) -> None:
    """Writes the manifest aside and renames it in place (after the outputs it describes)."""
    temp = out / f".{MANIFEST}.{os.getpid()}.tmp"
    with open(temp, "w") as f:
        f.write(manifest.to_json())
        f.flush()
        os.fsync(f.fileno())
    os.replace(temp, out / MANIFEST)


def drop_manifest(out: Path) -> None:
    """Before a full run replaces the tables: until its own manifest is written, the next
    run recomputes everything rather than appending to tables it did not describe."""
    (out / MANIFEST).unlink(missing_ok=True)


def runs_in(table_dir: Path) -> list[tuple[int, Path, bool]]:
    """(run, path, hidden) of every run directory of a table."""
    found = []
    if table_dir.is_dir():
        for child in table_dir.iterdir():
            if child.is_dir() and (m := RUN_DIR.match(child.name)):
                found.append((int(m.group(1)), child, child.name.startswith("_")))
    return sorted(found)


def remove_uncommitted(out: Path, tables: tuple[str, ...], committed: int) -> list[Path]:
    """Removes the run directories of `tables` that no manifest covers (a run cut short):
    hidden ones and visible ones newer than `committed`. Returns what it removed."""
    removed = []
    for table in tables:
        for run, path, hidden in runs_in(out / table):
            if hidden or run > committed:
                shutil.rmtree(path, ignore_errors=True)
                removed.append(path)
    return removed


def committed_files(table_dir: Path, manifest: Manifest | None,
                    hidden_ok: bool = False) -> list[Path]:
    """The Parquet files of a table a reader should see: with a manifest, those of the runs
    it covers (files outside run directories too); without one, every visible file
    (`table_dir` itself may be hidden)."""
    files = []
    for path in sorted(table_dir.rglob("*.parquet")):
        parts = path.relative_to(table_dir).parts
        if not hidden_ok and any(p.startswith((".", "_")) for p in parts):
            continue
        if manifest is not None and len(parts) > 1 and (m := RUN_DIR.match(parts[0])) \
                and int(m.group(1)) > manifest.run:
            continue
        files.append(path)
    return files


def file_time_range(path: Path) -> tuple[int, int] | None:
    """The snapshot times (epoch ms) a snapshot file covers, from its name; None if the name
    does not say."""
    if m := SNAPSHOT_FILE.match(path.name):
        return int(m.group(1)), int(m.group(1))
    if m := COMPACTED_FILE.match(path.name):
        return int(m.group(1)), int(m.group(2))
    return None


def snapshot_files(snapshots: Path) -> list[Path]:
    """The visible snapshot files under the snapshot table's directory."""
    return [p for p in sorted(snapshots.rglob("*.parquet"))
            if not any(part.startswith((".", "_"))
                       for part in p.relative_to(snapshots).parts)]


def files_after(files: list[Path], watermark_ms: int | None) -> list[Path]:
    """The files that may hold snapshots newer than the watermark (all when None); files
    whose names do not say are kept (the job filters their rows by time)."""
    if watermark_ms is None:
        return list(files)
    return [p for p in files
            if (span := file_time_range(p)) is None or span[1] > watermark_ms]
