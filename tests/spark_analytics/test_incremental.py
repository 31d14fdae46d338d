"""Incremental runs of the lag job: scenario.py's history (every status) arriving in three
parts, one run each, with a crash between two appends of the second run; the tables then
equal the full run's (conftest `outputs`), row for row."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from spark_analytics import constants as C
from spark_analytics import incremental, lag
from spark_analytics.schema import SNAPSHOTS_DIR
from tests.spark_analytics.scenario import WINDOW


def rows_of(out: Path, table: str) -> list[tuple]:
    manifest = incremental.read_manifest(out)
    files = incremental.committed_files(out / table, manifest)
    rows: list[dict[str, Any]] = []
    for f in files:
        rows += pq.read_table(f).to_pylist()
    return sorted((tuple(sorted(r.items())) for r in rows), key=repr)


def arrive(source: Path, target: Path, snapshot_files: list[Path]) -> None:
    for f in snapshot_files:
        dest = target / f.relative_to(source)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(f, dest)


def test_incremental_runs_with_a_crash_equal_the_full_run(
        spark, scenario_dir: Path, outputs: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    files = incremental.snapshot_files(scenario_dir / SNAPSHOTS_DIR)
    assert len(files) == 5
    data, out = tmp_path / "in", tmp_path / "out"
    arrive(scenario_dir, data, files[:2])
    assert set(lag.run_lag_job(spark, str(data), str(out), WINDOW)) == set(C.OUTPUT_TABLES)
    assert incremental.read_manifest(out).run == 1

    arrive(scenario_dir, data, files[2:3])
    real_rename = lag.os.rename
    renames: list[str] = []

    def crash_on_second_append(a: Any, b: Any) -> None:
        renames.append(str(b))
        if len(renames) == 2:
            raise OSError("killed between two appends")
        real_rename(a, b)

    monkeypatch.setattr(lag.os, "rename", crash_on_second_append)
    with pytest.raises(OSError, match="between two appends"):
        lag.run_lag_job(spark, str(data), str(out), WINDOW)
    monkeypatch.undo()
    assert incremental.read_manifest(out).run == 1  # not recorded: repeated next time
    assert (out / C.QUEUE_LAG / "run-000002").is_dir()  # the first append went through

    arrive(scenario_dir, data, files[3:])
    assert lag.run_lag_job(spark, str(data), str(out), WINDOW)
    manifest = incremental.read_manifest(out)
    assert manifest.run == 2
    assert [r for r, _, _ in incremental.runs_in(out / C.QUEUE_LAG)] == [1, 2]
    assert lag.run_lag_job(spark, str(data), str(out), WINDOW) == {}  # nothing new

    for table in C.OUTPUT_TABLES:
        assert rows_of(out, table) == rows_of(outputs, table), table
