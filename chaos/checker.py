"""Checkers: pure functions from a history (a list of entries, history.py) to a result (plain
JSON-able dicts). Modelled on Jepsen's queue checkers and OpenMessaging Chaos's MQ, order
and recovery (RTO) checkers.

- check_queue: acknowledged but never consumed nor found by the final read (lost),
  consumed more than once (duplicates), consumed but never sent (unexpected), found by the
  final read but never consumed (undelivered). A send that failed, timed out or never
  completed is *unknown*: consumed is fine (`recovered`, as Jepsen says), not consumed too.
- check_order: per key of the ordered sends, a message consumed for the first time after a
  later one of its key was consumed (a redelivery is a duplicate, not an order violation).
- check_recovery: per fault window, time from the fault to the next successful send and
  consume, when failures began and stopped.
- check_errors_outside_faults: failed / unknown sends that met no fault window.
- check_loss_within_fall_behind: lost messages of a broker group against the replication
  fall-behind probed just before its master was killed.
- check_awaits: what the nemesis waited for (a route gone, back, a slave caught up), and
  when it came.
- check_consumer_offsets: the consumer groups' offsets committed on the masters (sampled
  every second when the scenario asks): a regression (a restarted master's offsets older
  than it had acknowledged) must be repaired, and how far and how long it went back is
  reported; messages read twice after a master's kill lie beyond what was committed before
  it.
"""

from __future__ import annotations

import collections
import statistics
from collections.abc import Sequence
from typing import Any

from chaos.history import (
    APPLIED,
    AWAIT,
    CONSUMER_OFFSETS,
    FALL_BEHIND,
    FAULT,
    RUN,
    RUNNER,
    Entry,
)
from chaos.operations import (
    SEND_OK,
    FaultWindow,
    Operation,
    consumes,
    fault_windows,
    final_reads,
    history_end,
    ordered_entries,
    probes,
    run_info,
    sends,
)

EXAMPLES = 20  # ids listed per finding; the counts are complete


def _examples(items: Sequence[Any]) -> list[Any]:
    return list(items[:EXAMPLES])


def _sort_ids(ids: Sequence[str] | set[str]) -> list[str]:
    def key(i: str) -> tuple[str, int]:
        k, _, seq = i.rpartition("#")
        return (k, int(seq)) if seq.isdigit() else (i, -1)
    return sorted(ids, key=key)


# -- queue -------------------------------------------------------------------------------------
def check_queue(entries: Sequence[Entry]) -> dict[str, Any]:
    entries = ordered_entries(entries)
    send_ops = sends(entries)
    delivered = collections.Counter(op.id for op in consumes(entries))
    stored = final_reads(entries)
    attempted = {op.id: op for op in send_ops}
    acked = {op.id for op in send_ops if op.acknowledged}
    weak = {op.id: op.value.get("status") for op in send_ops if op.ok and not op.acknowledged}
    unknown = {op.id for op in send_ops if op.failed}
    failed_definitely = {op.id for op in send_ops if op.type == "fail"}
    lost = _sort_ids([i for i in acked if not delivered[i] and i not in stored])
    lost_weak = _sort_ids([i for i in weak if not delivered[i] and i not in stored])
    undelivered = _sort_ids([i for i in stored if not delivered[i]])
    duplicates = {i: n for i, n in delivered.items() if n > 1}
    unexpected = _sort_ids([i for i in delivered if i not in attempted])
    recovered = _sort_ids([i for i in unknown if delivered[i]])
    recovered_failed = _sort_ids([i for i in failed_definitely if delivered[i]])
    dup_counts = collections.Counter(duplicates.values())
    by_phase = _redeliveries_by_phase(entries)
    return {
        "attempted": len(attempted),
        "acknowledged": len(acked),
        "acknowledged_weak": len(weak),  # stored without the replica / flush asked for
        "weak_statuses": dict(collections.Counter(weak.values())),
        "unknown": len(unknown),
        "consumed_distinct": len(delivered),
        "deliveries": sum(delivered.values()),
        "lost_count": len(lost),
        "lost": _examples(lost),
        "lost_weak_count": len(lost_weak),
        "lost_weak": _examples(lost_weak),
        # still stored on a broker at the end (the final read found them), yet never given
        # to the consumer group: not lost, but not delivered either
        "undelivered_count": len(undelivered),
        "undelivered": _examples(undelivered),
        "duplicate_count": len(duplicates),
        "duplicate_deliveries": sum(n - 1 for n in duplicates.values()),
        # how many messages were delivered twice, three times, ...
        "duplicate_histogram": {str(k): dup_counts[k] for k in sorted(dup_counts)},
        "duplicates": {i: duplicates[i] for i in _examples(_sort_ids(duplicates))},
        # when the extra deliveries came: in a fault window, in the send phase outside one,
        # while draining, or after the drain (while the clients shut down)
        "duplicate_deliveries_by_phase": by_phase,
        "unexpected_count": len(unexpected),
        "unexpected": _examples(unexpected),
        "recovered_count": len(recovered),  # unknown sends that were consumed
        "recovered": _examples(recovered),
        # a send the client called failed for certain (fail, not info) yet consumed: a
        # client that misreports; zero is expected
        "failed_but_consumed_count": len(recovered_failed),
        "failed_but_consumed": _examples(recovered_failed),
        "unknown_not_consumed": len(unknown) - len(recovered),
        "at_least_once": not lost,
        "at_most_once": not duplicates,
        "valid": not lost and not unexpected and not recovered_failed,
    }


def _redeliveries_by_phase(entries: Sequence[Entry]) -> dict[str, int]:
    marks = {e["value"].get("phase"): e["time"] for e in entries
             if e["f"] == RUN and e["process"] == RUNNER}
    drain, drained = marks.get("drain", float("inf")), marks.get("drained", float("inf"))
    end = history_end(entries)
    windows = fault_windows(entries)
    seen: set[str] = set()
    out: collections.Counter[str] = collections.Counter()
    for op in consumes(entries):
        if op.id not in seen:
            seen.add(op.id)
            continue
        t = op.invoke_time
        if t >= drained:
            out["shutdown"] += 1
        elif t >= drain:
            out["drain"] += 1
        elif any(w.start <= t <= w.until(end) for w in windows):
            out["fault windows"] += 1
        else:
            out["send phase"] += 1
    return dict(out)


# -- order -------------------------------------------------------------------------------------
def check_order(entries: Sequence[Entry]) -> dict[str, Any]:
    """Per key of the sends marked `ordered`, first deliveries must come in sequence order
    (gaps are fine: lost and unknown sends are check_queue's business). A violation is told
    apart by where the two messages were stored: in the same queue (what RocketMQ orders),
    or in two queues (the key moved: send_orderly picks a queue by the key's hash among the
    queues of the route, so a route that lost or regained a broker's queues moves keys, and
    RocketMQ orders nothing across queues)."""
    entries = ordered_entries(entries)
    ordered_keys = {op.value.get("key") for op in sends(entries) if op.value.get("ordered")}
    seen: dict[str, set[int]] = collections.defaultdict(set)
    highest: dict[str, tuple[int, str]] = {}  # key -> (highest seq delivered, its queue)
    violations: list[dict[str, Any]] = []
    per_key: collections.Counter[str] = collections.Counter()
    for op in consumes(entries):
        key, seq = op.value.get("key"), op.value.get("seq")
        if key not in ordered_keys or not isinstance(seq, int):
            continue
        if seq in seen[key]:
            continue  # a redelivery
        queue = f"{op.value.get('broker')}-{op.value.get('queue')}"
        if key in highest and seq < highest[key][0]:
            per_key[key] += 1
            violations.append({"key": key, "seq": seq, "after_seq": highest[key][0],
                               "time": op.invoke_time, "process": op.process,
                               "queue": queue, "after_queue": highest[key][1]})
        seen[key].add(seq)
        if key not in highest or seq > highest[key][0]:
            highest[key] = (seq, queue)
    within = [v for v in violations if v["queue"] == v["after_queue"]]
    return {"keys_checked": len(ordered_keys), "violation_count": len(violations),
            "within_queue_count": len(within),
            "across_queues_count": len(violations) - len(within),
            "keys_with_violations": dict(sorted(per_key.items())),
            "violations": _examples(violations), "valid": not violations}


# -- recovery ----------------------------------------------------------------------------------
def _send_recovery(ops: list[Operation], w: FaultWindow, end: float) -> dict[str, Any]:
    until = w.until(end)
    completed = [op for op in ops if op.complete_time is not None
                 and w.start <= op.complete_time <= until]
    failures = [op for op in completed if op.failed]
    never = [op for op in ops if op.complete_time is None and op.invoke_time <= until]
    fresh_ok = [op for op in ops if op.ok and op.invoke_time >= w.start
                and op.complete_time is not None]
    out: dict[str, Any] = {
        "attempts": len(completed) + len(never), "failures": len(failures) + len(never),
        "first_failure_s": _rel(failures[0].complete_time, w) if failures else None,
        "last_failure_s": _rel(failures[-1].complete_time, w) if failures else None,
        # a send invoked after the fault began that succeeded: the cluster took writes again
        "next_ok_s": _rel(fresh_ok[0].complete_time, w) if fresh_ok else None,
        "max_ok_latency_s": _round(max((op.latency or 0.0 for op in completed if op.ok),
                                       default=None)),
    }
    if failures:
        last = failures[-1].complete_time or w.start
        after = [op for op in completed if op.ok and (op.complete_time or 0) > last]
        # OpenMessaging Chaos's RTO: from the first failed attempt's start to the next ok
        first_bad_start = failures[0].invoke_time
        next_ok = [op for op in ops if op.ok and op.complete_time is not None
                   and op.complete_time > (failures[0].complete_time or 0)]
        out["unavailable_s"] = (_round(next_ok[0].complete_time - first_bad_start)
                                if next_ok and next_ok[0].complete_time is not None else None)
        # failures stopped: the first ok after the last failure in the window
        out["settled_s"] = _rel(after[0].complete_time, w) if after else None
    else:
        out["unavailable_s"] = 0.0
        out["settled_s"] = 0.0
    out["keys_failed"], out["keys_not_recovered"], out["longest_key_outage_s"] = (
        _key_outages(ops, w, until))
    if out["keys_not_recovered"]:
        out["settled_s"] = None  # some key never sent again: not settled
    return out


def _key_outages(ops: list[Operation], w: FaultWindow, until: float
                 ) -> tuple[int, int, float | None]:
    """Per key: from its first failure in the window to its next ok (ordered sends cannot
    go to another broker, so a key can stay down while others are fine)."""
    first_fail: dict[str, float] = {}
    outage: dict[str, float | None] = {}
    for op in ops:
        key = op.value.get("key")
        t = op.complete_time
        if t is None or key is None or t < w.start:
            continue
        if op.failed and t <= until and key not in first_fail:
            first_fail[key] = op.invoke_time
            outage[key] = None
        elif op.ok and key in first_fail and outage[key] is None:
            outage[key] = t - first_fail[key]
    done = [o for o in outage.values() if o is not None]
    not_recovered = sum(1 for o in outage.values() if o is None)
    return len(first_fail), not_recovered, _round(max(done, default=None))


def _consume_recovery(ops: list[Operation], send_ops: list[Operation], w: FaultWindow
                      ) -> dict[str, Any]:
    invoked = {op.id: op.invoke_time for op in send_ops}
    after = [op for op in ops if op.invoke_time >= w.start]
    fresh = [op for op in after if invoked.get(op.id, -1.0) >= w.start]
    by_group: dict[str, float] = {}
    for op in after:
        group = op.value.get("broker")
        if isinstance(group, str) and group not in by_group:
            by_group[group] = op.invoke_time - w.start
    return {
        "next_consume_s": _rel(after[0].invoke_time, w) if after else None,
        # end to end: a message sent after the fault began came out again
        "next_consume_of_new_send_s": _rel(fresh[0].invoke_time, w) if fresh else None,
        "next_consume_by_group_s": {g: _round(t) for g, t in sorted(by_group.items())},
    }


def check_recovery(entries: Sequence[Entry]) -> dict[str, Any]:
    entries = ordered_entries(entries)
    end = history_end(entries)
    send_ops, consume_ops = sends(entries), consumes(entries)
    classes = {"all": send_ops,
               "plain": [op for op in send_ops if not op.value.get("ordered")],
               "ordered": [op for op in send_ops if op.value.get("ordered")]}
    windows = []
    for w in fault_windows(entries):
        windows.append({
            "window": w.window, "fault": w.fault, "node": w.node, "start": w.start,
            "end": w.end, "duration_s": _round(w.until(end) - w.start), "healed": w.end is not None,
            "send": {name: _send_recovery(ops, w, end) for name, ops in classes.items() if ops},
            "consume": _consume_recovery(consume_ops, send_ops, w),
        })
    return {"windows": windows}


def _rel(t: float | None, w: FaultWindow) -> float | None:
    return None if t is None else _round(t - w.start)


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 3)


# -- errors outside fault windows --------------------------------------------------------------
def check_errors_outside_faults(entries: Sequence[Entry]) -> dict[str, Any]:
    entries = ordered_entries(entries)
    end = history_end(entries)
    windows = fault_windows(entries)
    outside = []
    for op in sends(entries):
        if not op.failed:
            continue
        t1 = op.complete_time if op.complete_time is not None else end
        if not any(w.covers(op.invoke_time, t1, end) for w in windows):
            outside.append({"id": op.id, "time": op.invoke_time, "process": op.process,
                            "error": op.error if op.type else "never completed"})
    by_error = collections.Counter(str(o["error"]) for o in outside)
    return {"count": len(outside), "by_error": dict(by_error), "examples": _examples(outside),
            "valid": not outside}


# -- loss against the replication fall-behind --------------------------------------------------
def check_loss_within_fall_behind(entries: Sequence[Entry]) -> dict[str, Any]:
    """For each fall-behind probe taken just before a fault (value `before_window`): the
    group's lost messages (acknowledged before the fault, never consumed nor found by the
    final read) must all lie at or beyond the slave's acknowledged commitlog offset.
    Compared in messages through their commitlog offsets: `behind_messages` are the group's
    acknowledged messages inside the reported byte range [slave ack, master max),
    `written_after_probe` those beyond it (sent between the probe and the kill)."""
    entries = ordered_entries(entries)
    send_ops = sends(entries)
    delivered = {op.id for op in consumes(entries)} | final_reads(entries)
    # A kill takes effect between its start and its `applied` entry (when the node was seen
    # dead): the dying master may acknowledge sends until then.
    starts = {w.window: w.start for w in fault_windows(entries)}
    starts |= {e["value"]["window"]: e["time"] for e in entries
               if e["f"] == FAULT and e["value"].get("phase") == APPLIED}
    results = []
    for probe in probes(entries, FALL_BEHIND):
        v = probe["value"]
        if v.get("before_window") is None:
            continue
        group, ack, top = v.get("group"), int(v["slave_ack_offset"]), int(v["master_max_offset"])
        # what the group acknowledged of the sends made before the fault took effect (a
        # master restarted later writes on). By the send's start, not its answer: the dying
        # master's last answers may reach the client after the kill was seen (a fresh run
        # lost 603 and counted 602 here when the cut was by answer time).
        fault_start = starts.get(v["before_window"], float("inf"))
        acked = [op for op in send_ops if op.acknowledged and op.value.get("broker") == group
                 and isinstance(op.value.get("commit_log_offset"), int)
                 and op.invoke_time <= fault_start]
        lost = [op for op in acked if op.id not in delivered]
        below = [op.id for op in lost if op.value["commit_log_offset"] < ack]
        offsets = sorted(op.value["commit_log_offset"] for op in acked)
        record = statistics.median(b - a for a, b in zip(offsets, offsets[1:], strict=False)
                                   ) if len(offsets) > 1 else 0
        results.append({
            "group": group, "window": v["before_window"], "probe_time": probe["time"],
            "fall_behind_bytes": int(v.get("fall_behind_bytes", top - ack)),
            "fall_behind_seconds": v.get("fall_behind_seconds"),
            "slave_ack_offset": ack, "master_max_offset": top,
            "behind_messages": sum(1 for o in offsets if ack <= o < top),
            "written_after_probe": sum(1 for o in offsets if o >= top),
            "lost_messages": len(lost),
            "lost_within_reported": sum(1 for op in lost
                                        if ack <= op.value["commit_log_offset"] < top),
            "lost_after_probe": sum(1 for op in lost if op.value["commit_log_offset"] >= top),
            "lost_bytes_estimate": int(len(lost) * record),
            "lost_below_slave_ack": _examples(_sort_ids(below)),
            "lost_below_slave_ack_count": len(below),
            "valid": not below,
        })
    return {"probes": results, "valid": all(r["valid"] for r in results)}


# -- await steps -------------------------------------------------------------------------------
def check_awaits(entries: Sequence[Entry]) -> dict[str, Any]:
    """What the nemesis waited for (a route gone after the expiry, back after the heal, a
    slave caught up), whether it came and how long after the fault's start and end."""
    awaits = [{k: v for k, v in p["value"].items() if k != "kind"} | {"time": p["time"]}
              for p in probes(ordered_entries(entries), AWAIT)]
    return {"awaits": awaits, "valid": all(a["met"] for a in awaits)}


# -- committed consumer offsets -----------------------------------------------------------------
def _offset_samples(entries: Sequence[Entry]
                    ) -> dict[tuple[str, str, str, str], list[tuple[float, int]]]:
    """(master addr, broker group, consumer group, topic/queue) -> [(time, offset)]."""
    out: dict[tuple[str, str, str, str], list[tuple[float, int]]] = collections.defaultdict(list)
    for p in probes(entries, CONSUMER_OFFSETS):
        v = p["value"]
        for group, offsets in (v.get("groups") or {}).items():
            for queue, offset in offsets.items():
                out[(v["addr"], v["broker"], group, queue)].append((p["time"], int(offset)))
    return out


def check_consumer_offsets(entries: Sequence[Entry]) -> dict[str, Any]:
    """The consumer groups' offsets committed on the masters, sampled during the run. A
    sample below an earlier one of its queue is a regression (a master restarted after a
    kill -9 reloads the offsets it last persisted, up to flushConsumerOffsetInterval = 5 s
    old); it is repaired when the queue's offset is back where it had been (the consumers
    commit their own position every 5 s). Valid when every regression was repaired: no
    offset stays behind, and messages read twice after a master's kill lie beyond what was
    committed before it."""
    entries = ordered_entries(entries)
    samples = _offset_samples(entries)
    regressions = []
    for (addr, broker, group, queue), series in sorted(samples.items()):
        high, high_t = series[0][1], series[0][0]
        open_: dict[str, Any] | None = None
        for t, offset in series[1:]:
            if open_ is not None and offset >= open_["from"]:
                open_["repaired_after_s"] = round(t - open_["time"], 3)
                open_ = None
            if offset < high and open_ is None:
                open_ = {"addr": addr, "broker": broker, "group": group, "queue": queue,
                         "from": high, "to": offset, "time": t,
                         "previous_sample_time": high_t, "repaired_after_s": None}
                regressions.append(open_)
            if offset >= high:
                high, high_t = offset, t
    unrepaired = [r for r in regressions if r["repaired_after_s"] is None]
    redeliveries = _redeliveries_against_commits(entries, samples)
    return {"samples": sum(len(s) for s in samples.values()), "queues": len(samples),
            "backwards_count": len(regressions), "backwards": _examples(regressions),
            "max_backwards_messages": max((r["from"] - r["to"] for r in regressions),
                                          default=0),
            "longest_repair_s": max((r["repaired_after_s"] for r in regressions
                                     if r["repaired_after_s"] is not None), default=None),
            "unrepaired_count": len(unrepaired), "unrepaired": _examples(unrepaired),
            "redeliveries": redeliveries,
            "valid": not unrepaired and all(r["valid"] for r in redeliveries)}


def _redeliveries_against_commits(entries: Sequence[Entry],
                                  samples: dict[tuple[str, str, str, str],
                                                list[tuple[float, int]]]
                                  ) -> list[dict[str, Any]]:
    """For each kill of a master: messages of its group consumed before the kill and again
    after it must lie at or beyond the offset the group had committed on that master before
    the kill (what a consumer may read twice is what it had not committed): the duplicates'
    bound is the messages consumed beyond the committed offsets at the kill."""
    out = []
    consume_ops = consumes(entries)
    for w in fault_windows(entries):
        if w.fault not in ("kill", "stop") or not w.node.endswith("-0"):
            continue
        broker = w.node.rsplit("-", 1)[0]
        committed: dict[str, int] = {}  # "topic/queue" -> offset (the consumers' group)
        for (_, b, _, queue), series in samples.items():
            before = [o for t, o in series if t < w.start]
            if b == broker and before:
                committed[queue] = max(committed.get(queue, -1), before[-1])
        if not committed:
            continue
        first: dict[str, Operation] = {}
        count: collections.Counter[str] = collections.Counter()
        for op in consume_ops:
            first.setdefault(op.id, op)
            count[op.id] += 1
        mine = [op for op in first.values() if op.value.get("broker") == broker
                and op.invoke_time < w.start]
        uncommitted = [op for op in mine
                       if op.value.get("queue_offset", -1) >= committed.get(_queue(op), 0)]
        twice = [op for op in mine if count[op.id] > 1]
        below = [op.id for op in twice
                 if op.value.get("queue_offset", -1) < committed.get(_queue(op), 0)]
        broker_distinct = sum(1 for op in first.values() if op.value.get("broker") == broker)
        broker_extra = sum(count[i] - 1 for i, op in first.items()
                           if op.value.get("broker") == broker)
        out.append({"window": w.window, "node": w.node, "broker": broker,
                    # every message of the group consumed in the run, and its extra
                    # deliveries: a queue re-read from its start at most doubles it
                    "broker_consumed": broker_distinct, "broker_extra_deliveries": broker_extra,
                    "queues_committed": len(committed),
                    "consumed_before_fault": len(mine),
                    "uncommitted_at_fault": len(uncommitted),
                    "redelivered": len(twice),
                    "redelivered_below_committed_count": len(below),
                    "redelivered_below_committed": _examples(_sort_ids(below)),
                    "valid": not below})
    return out


def _queue(op: Operation) -> str:
    return f"{op.value.get('topic')}/{op.value.get('queue')}"


# -- all ---------------------------------------------------------------------------------------
def check(entries: Sequence[Entry]) -> dict[str, Any]:
    """Every checker over one history; `valid` when nothing acknowledged was lost, nothing
    unexpected came, no key went out of order and no error came outside a fault window."""
    entries = ordered_entries(entries)
    result = {
        "run": run_info(entries),
        "queue": check_queue(entries),
        "order": check_order(entries),
        "recovery": check_recovery(entries),
        "errors_outside_faults": check_errors_outside_faults(entries),
        "fall_behind": check_loss_within_fall_behind(entries),
        "awaits": check_awaits(entries),
        "consumer_offsets": check_consumer_offsets(entries),
    }
    result["valid"] = all(result[k]["valid"] for k in
                          ("queue", "order", "errors_outside_faults", "fall_behind", "awaits",
                           "consumer_offsets"))
    return result


__all__ = ["SEND_OK", "check", "check_errors_outside_faults", "check_loss_within_fall_behind",
           "check_order", "check_queue", "check_recovery"]
