"""One hand-made cluster history of 5 snapshots (10 s apart, broker clock = snapshot time +
100 ms) whose answers the tests work out by hand. Window 4: statuses look at snapshots 1-4.

broker-a (master 0, slaves 1 and 2), broker-b, broker-c (no answer at snapshot 4):
- G_OK TopicA q0: lags 0,5,0,5,0, lag_bytes 200/message (exact), store time 2 s ago -> OK
- G_OK TopicA q1: offset 100 then 50 (backwards, but before the window), lags 100,160x4 ->
  OK (moves, lag flat: never rose)
- G_OK %RETRY%G_OK q0: lag 3 (300 bytes, estimated), offset still, fresh commits -> STALL
- G_OK %DLQ%G_OK q0: lag 5, no commit time, no consumer online -> STOP
- G_WARN TopicA q0: lags 0,10,20,30,40, no lag_bytes (average), store time lag x 0.1 s -> WARN
- G_STALL TopicA q0: offset 50 while the broker moves, fresh commits -> STALL
- G_STOP TopicA q0: offset 50, last commit 60 s before snapshot 0 -> STOP
- G_STOP TopicA q1: offset 50, no commit time, no consumer online -> STOP
- G_REWIND TopicA q0: offsets 100,150,180,120,130 (reset backwards at 3) -> REWIND
- G_NEVER TopicA q0: never committed (-1), min offset 20, broker 120 -> lag 100, STALL
- G_INTERP TopicB q0 (no store times): broker 100..500 by 100, offsets 100,100,120,150,150
  -> interpolated time lags -,10,18,25,35 s; WARN
- G_INTERP TopicB q1 (no store times): broker 1000..1400, offset 900 -> extrapolated
  time lags unknown,20,30,40,50 s; STALL
- G_BYTES TopicC q0/q1 on broker-b: lags 0,10,20,30,40; lag_bytes only q0@1 (5000 exact)
  and q1@3 (9000 estimated) -> means 500 @1, 300 @3, 350 over all (average elsewhere)
- G_C TopicD q0 on broker-c, snapshots 0-3 only, caught up -> OK
"""

from __future__ import annotations

from typing import Any

from tests.spark_analytics.snapshots import broker, ms, queue, slave

SNAPSHOTS = 5
WINDOW = 4


def clock(i: int) -> int:
    return ms(i, 100)


def scenario_rows() -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for i in range(SNAPSHOTS):
        rows += _brokers(i) + _queues(i)
    return rows


def _brokers(i: int) -> list[dict[str, Any]]:
    master_max = 10_000 + 1_000 * i
    rows = [
        broker(i, "broker-a", 0, commitlog_min_offset=0, commitlog_max_offset=master_max,
               dispatch_behind_bytes=123 if i == 4 else 0, put_tps=10.0),
        broker(i, "broker-a", 1, commitlog_max_offset=master_max - 800),
        broker(i, "broker-a", 2, commitlog_max_offset=9_000) if i != 3 else
        broker(i, "broker-a", 2, reachable=False, error="DEADLINE_EXCEEDED",
               broker_time_ms=None, role=None),
        broker(i, "broker-b", 0, commitlog_max_offset=5_000, dispatch_behind_bytes=0),
        slave(i, "broker-a", 1, commitlog_max_offset=master_max,
              slave_ack_offset=master_max - 500, fall_behind_bytes=500,
              fall_behind_seconds=0.5),
        slave(i, "broker-a", 2, commitlog_max_offset=master_max, slave_ack_offset=-1,
              in_sync=False, link_state="disconnected"),
    ]
    if i < 4:
        rows.append(broker(i, "broker-c", 0, commitlog_max_offset=100))
    else:
        rows.append(broker(i, "broker-c", 0, reachable=False, error="DEADLINE_EXCEEDED",
                           broker_time_ms=None, role=None))
    return rows


def _queues(i: int) -> list[dict[str, Any]]:
    fresh = ms(i, -1000)
    ok_lag = 5 if i % 2 else 0
    warn_lag = 10 * i
    rows = [
        queue(i, "G_OK", "TopicA", 0, 100 + 10 * i, 100 + 10 * i - ok_lag,
              lag_bytes=200 * ok_lag, lag_bytes_method="exact",
              first_unconsumed_ms=clock(i) - 2000 if ok_lag else None),
        queue(i, "G_OK", "TopicA", 1, 200 + 10 * i, 100 if i == 0 else 40 + 10 * i,
              first_unconsumed_ms=clock(i) - 10_000),
        queue(i, "G_OK", "%RETRY%G_OK", 0, 10, 7, lag_bytes=300, lag_bytes_method="estimated",
              first_unconsumed_ms=clock(i) - 3000),
        queue(i, "G_OK", "%DLQ%G_OK", 0, 5, 0, last_commit_ms=None, online_consumers=0,
              first_unconsumed_ms=clock(i) - 60_000),
        queue(i, "G_WARN", "TopicA", 0, 100 + 20 * i, 100 + 10 * i,
              first_unconsumed_ms=clock(i) - 100 * warn_lag if warn_lag else None),
        queue(i, "G_STALL", "TopicA", 0, 100 + 10 * i, 50, first_unconsumed_ms=clock(i) - 5000),
        queue(i, "G_STOP", "TopicA", 0, 100 + 10 * i, 50, last_commit_ms=ms(0, -60_000),
              first_unconsumed_ms=clock(i) - 5000),
        queue(i, "G_STOP", "TopicA", 1, 100 + 10 * i, 50, last_commit_ms=None,
              online_consumers=0, first_unconsumed_ms=clock(i) - 5000),
        queue(i, "G_REWIND", "TopicA", 0, 200, (100, 150, 180, 120, 130)[i],
              first_unconsumed_ms=clock(i) - 7000),
        queue(i, "G_NEVER", "TopicA", 0, 120, -1, queue_min_offset=20, last_commit_ms=None,
              first_unconsumed_ms=clock(i) - 50_000),
        queue(i, "G_INTERP", "TopicB", 0, 100 + 100 * i, (100, 100, 120, 150, 150)[i]),
        queue(i, "G_INTERP", "TopicB", 1, 1000 + 100 * i, 900),
        queue(i, "G_BYTES", "TopicC", 0, 100 + 10 * i, 100, broker_name="broker-b",
              lag_bytes=5000 if i == 1 else None, lag_bytes_method="exact" if i == 1 else None,
              first_unconsumed_ms=clock(i) - 1000 if i else None),
        queue(i, "G_BYTES", "TopicC", 1, 100 + 10 * i, 100, broker_name="broker-b",
              lag_bytes=9000 if i == 3 else None,
              lag_bytes_method="estimated" if i == 3 else None,
              first_unconsumed_ms=clock(i) - 1000 if i else None),
    ]
    if i < 4:
        rows.append(queue(i, "G_C", "TopicD", 0, 100, 100, broker_name="broker-c"))
    for r in rows:
        if r["last_commit_ms"] is not None:
            r["last_commit_ms"] = min(r["last_commit_ms"], fresh)
    return rows
