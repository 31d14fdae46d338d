"""Hand-made snapshot tables for the lag job's tests: rows as the collector writes them
(spark_analytics.schema), as Parquet files or as Spark DataFrames."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from spark_analytics.schema import (
    COLUMNS,
    KIND_BROKER,
    KIND_QUEUE,
    KIND_SLAVE,
    SNAPSHOTS_DIR,
    arrow_schema,
)

CLUSTER = "DefaultCluster"
T0 = dt.datetime(2026, 1, 5, 10, 0, 0, tzinfo=dt.UTC)
T0_MS = int(T0.timestamp() * 1000)
INTERVAL_S = 10


def at(i: int) -> dt.datetime:
    """Snapshot i's time: T0 + i x 10 s."""
    return T0 + dt.timedelta(seconds=INTERVAL_S * i)


def ms(i: int, plus_ms: int = 0) -> int:
    return T0_MS + INTERVAL_S * 1000 * i + plus_ms


def row(kind: str, snapshot: int, **values: Any) -> dict[str, Any]:
    """A full row (every column, null unless given); broker_time_ms defaults to the
    snapshot time + 100 ms (the broker's clock)."""
    full = {c.name: None for c in COLUMNS}
    full.update(snapshot_time=at(snapshot), kind=kind, cluster=CLUSTER,
                broker_time_ms=ms(snapshot, 100))
    full.update(values)
    return full


def queue(snapshot: int, group: str, topic: str, queue_id: int, broker_offset: int,
          consumer_offset: int, broker_name: str = "broker-a", **values: Any) -> dict[str, Any]:
    defaults = dict(broker_id=0, broker_addr="127.0.0.1:10911", role="ASYNC_MASTER",
                    reachable=True, queue_min_offset=0, online_consumers=1,
                    last_commit_ms=ms(snapshot, -1000))
    defaults.update(values)
    return row(KIND_QUEUE, snapshot, group=group, topic=topic, queue_id=queue_id,
               broker_name=broker_name, broker_offset=broker_offset,
               consumer_offset=consumer_offset, **defaults)


def broker(snapshot: int, broker_name: str, broker_id: int = 0, **values: Any
           ) -> dict[str, Any]:
    defaults = dict(broker_addr=f"127.0.0.1:{10911 + 100 * broker_id}",
                    role="SLAVE" if broker_id else "ASYNC_MASTER", reachable=True)
    defaults.update(values)
    return row(KIND_BROKER, snapshot, broker_name=broker_name, broker_id=broker_id, **defaults)


def slave(snapshot: int, broker_name: str, slave_id: int, **values: Any) -> dict[str, Any]:
    defaults = dict(broker_id=0, broker_addr="127.0.0.1:10911", role="ASYNC_MASTER",
                    slave_addr=f"127.0.0.1:{10911 + 100 * slave_id}", in_sync=True,
                    link_state="connected")
    defaults.update(values)
    return row(KIND_SLAVE, snapshot, broker_name=broker_name, slave_id=slave_id, **defaults)


def write_snapshots(directory: Path, rows: list[dict[str, Any]]) -> Path:
    """Writes rows as the collector does: one file per snapshot under
    DIR/snapshots/date=YYYY-MM-DD/hour=HH/, each written aside and renamed. Returns DIR."""
    by_time: dict[dt.datetime, list[dict[str, Any]]] = {}
    for r in rows:
        by_time.setdefault(r["snapshot_time"], []).append(r)
    for when, snapshot_rows in by_time.items():
        part = (directory / SNAPSHOTS_DIR / f"date={when:%Y-%m-%d}" / f"hour={when:%H}")
        part.mkdir(parents=True, exist_ok=True)
        table = pa.Table.from_pylist(snapshot_rows, schema=arrow_schema())
        name = f"snapshot-{int(when.timestamp() * 1000)}.parquet"
        pq.write_table(table, part / f".{name}.tmp")  # hidden from readers until renamed
        (part / f".{name}.tmp").rename(part / name)
    return directory
