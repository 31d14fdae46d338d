"""What a person reads after a run: the one-screen summary of a result, and the chart of send
throughput and latency over time with the fault windows shaded (matplotlib, the `chaos`
extra)."""

from __future__ import annotations

import collections
import math
from pathlib import Path
from typing import Any

from chaos.history import RUN, Entry
from chaos.operations import consumes, fault_windows, history_end, ordered_entries, sends


def _s(x: float | None) -> str:
    return "never" if x is None else f"+{x:.2f} s"


def _send_line(name: str, r: dict[str, Any]) -> str:
    line = (f"     {name} sends: next ok {_s(r['next_ok_s'])}, failures {r['failures']}"
            f"/{r['attempts']}")
    if r["failures"]:
        line += (f" (first {_s(r['first_failure_s'])}, last {_s(r['last_failure_s'])}), "
                 f"settled {_s(r['settled_s'])}")
    if r.get("keys_failed"):
        line += (f", keys failed {r['keys_failed']} (not recovered {r['keys_not_recovered']},"
                 f" longest outage {_s(r['longest_key_outage_s'])})")
    if r.get("max_ok_latency_s") is not None:
        line += f", max ok latency {r['max_ok_latency_s']:.3f} s"
    return line


def summary(result: dict[str, Any]) -> str:
    run, q, order = result.get("run", {}), result["queue"], result["order"]
    verdict = result.get("scenario")
    head = f"mqchaos: {run.get('scenario', '?')} on {run.get('target', '?')}"
    if verdict is not None:
        head += " - " + ("PASSED" if verdict["passed"] else "FAILED")
    lines = [head]
    if verdict is not None:
        lines.append(f"  {verdict['description']}")
    dup_hist = ", ".join(f"x{k}: {v}" for k, v in q["duplicate_histogram"].items())
    lines += [
        f"sends: attempted {q['attempted']}, acknowledged {q['acknowledged']}, weak acks "
        f"{q['acknowledged_weak']}"
        + (" (" + ", ".join(f"{k} {v}" for k, v in q["weak_statuses"].items()) + ")"
           if q["weak_statuses"] else "")
        + f", unknown {q['unknown']} (consumed anyway {q['recovered_count']})",
        f"consumed: {q['consumed_distinct']} messages in {q['deliveries']} deliveries",
        f"lost: {q['lost_count']}" + (f" {q['lost'][:5]}" if q["lost_count"] else "")
        + (f"   lost weak acks: {q['lost_weak_count']}" if q["lost_weak_count"] else "")
        + f"   undelivered (still stored): {q['undelivered_count']}"
        + f"   unexpected: {q['unexpected_count']}"
        + f"   duplicates: {q['duplicate_count']} messages, {q['duplicate_deliveries']} extra "
        f"deliveries" + (f" ({dup_hist}; when: {q['duplicate_deliveries_by_phase']})"
                         if dup_hist else ""),
        f"order: {order['keys_checked']} ordered keys, {order['violation_count']} violations"
        + (f" in {order['keys_with_violations']} ({order.get('within_queue_count', '?')} "
           f"within a queue, {order.get('across_queues_count', '?')} across queues: the "
           "key moved)" if order["violation_count"] else ""),
        f"errors outside fault windows: {result['errors_outside_faults']['count']}"
        + (f" {result['errors_outside_faults']['by_error']}"
           if result["errors_outside_faults"]["count"] else ""),
        "fault windows:" if result["recovery"]["windows"] else "fault windows: none",
    ]
    for w in result["recovery"]["windows"]:
        end = f"healed at {w['end']:.1f} s" if w["healed"] else "never healed"
        lines.append(f"  #{w['window']} {w['fault']} {w['node']}: from {w['start']:.1f} s, "
                     f"{end} ({w['duration_s']} s)")
        for name in ("plain", "ordered"):
            if name in w["send"]:
                lines.append(_send_line(name, w["send"][name]))
        c = w["consume"]
        groups = ", ".join(f"{g} {_s(t)}" for g, t in c["next_consume_by_group_s"].items())
        lines.append(f"     consumes: next {_s(c['next_consume_s'])}, of a message sent after "
                     f"the fault {_s(c['next_consume_of_new_send_s'])}; by group: "
                     f"{groups or 'none'}")
    for p in result["fall_behind"]["probes"]:
        lines.append(
            f"fall-behind of {p['group']} just before window #{p['window']}: "
            f"{p['fall_behind_bytes']} bytes = {p['behind_messages']} messages (+"
            f"{p['written_after_probe']} written after the probe); lost {p['lost_messages']} "
            f"({p['lost_within_reported']} inside the reported range, {p['lost_after_probe']}"
            f" after it, {p['lost_below_slave_ack_count']} below the slave's ack)")
    for a in result.get("awaits", {}).get("awaits", []):
        since = (f"{_s(a['since_fault_end_s'])} after the heal"
                 if a.get("since_fault_end_s") is not None else
                 f"{_s(a.get('since_fault_start_s'))} after the fault")
        lines.append(f"await {a['node']} {a['condition']}: "
                     + (f"at {a['time']:.1f} s, {since}" if a["met"]
                        else f"not met after {a['waited_s']:.0f} s"))
    offsets = result.get("consumer_offsets", {})
    if offsets.get("samples"):
        lines.append(f"committed consumer offsets: {offsets['samples']} samples of "
                     f"{offsets['queues']} queues, {offsets['backwards_count']} went backwards"
                     + (f" (by at most {offsets['max_backwards_messages']} messages, back "
                        f"within {_s(offsets['longest_repair_s'])}; "
                        f"{offsets['unrepaired_count']} never back)"
                        if offsets["backwards_count"] else ""))
        for r in offsets["redeliveries"]:
            lines.append(f"  kill of {r['node']} (window #{r['window']}): consumed before it "
                         f"{r['consumed_before_fault']}, of which uncommitted "
                         f"{r['uncommitted_at_fault']} (the bound), consumed again "
                         f"{r['redelivered']}, below the committed offsets "
                         f"{r['redelivered_below_committed_count']}"
                         + (f" (e.g. {r['redelivered_below_committed'][:3]}: re-read from "
                            "before what was committed)"
                            if r["redelivered_below_committed_count"] else "")
                         + f"; extra deliveries of {r['broker']}'s messages "
                         f"{r['broker_extra_deliveries']} of {r['broker_consumed']}")
    if verdict is not None and verdict["problems"]:
        lines.append("problems:")
        lines += [f"  - {p}" for p in verdict["problems"]]
    return "\n".join(lines)


# -- chart -------------------------------------------------------------------------------------
def _bins(times: list[float], width: float, count: int) -> list[float]:
    out = [0.0] * count
    for t in times:
        i = int(t // width)
        if 0 <= i < count:
            out[i] += 1 / width
    return out


def chart(entries: list[Entry], result: dict[str, Any], path: Path) -> Path | None:
    """Send throughput (ok and failed per second), consumes per second and the latency of
    every acknowledged send over time; fault windows shaded. None when matplotlib is not
    installed (the result and summary do not need it)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    entries = ordered_entries(entries)
    end = max(history_end(entries), 1.0)
    width = max(0.5, round(end / 150, 1))
    count = int(math.ceil(end / width)) + 1
    xs = [i * width for i in range(count)]
    send_ops = sends(entries)
    ok = [op.complete_time for op in send_ops if op.ok and op.complete_time is not None]
    bad = [op.complete_time if op.complete_time is not None else op.invoke_time
           for op in send_ops if op.failed]
    consumed = [op.invoke_time for op in consumes(entries)]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(11, 6.5), sharex=True,
                                      gridspec_kw={"height_ratios": [1, 1]})
    top.step(xs, _bins(ok, width, count), where="post", label="sends ok /s", color="tab:blue")
    top.step(xs, _bins(bad, width, count), where="post", label="sends failed or unknown /s",
             color="tab:red")
    top.step(xs, _bins(consumed, width, count), where="post", label="consumed /s",
             color="tab:green", alpha=0.7)
    top.set_ylabel("operations / s")
    top.legend(loc="upper right", fontsize=8)
    by_kind: dict[bool, list[tuple[float, float]]] = collections.defaultdict(list)
    for op in send_ops:
        if op.ok and op.complete_time is not None and op.latency is not None:
            by_kind[bool(op.value.get("ordered"))].append((op.complete_time,
                                                           max(op.latency, 1e-5) * 1000))
    for ordered, color, label in ((False, "tab:blue", "plain send"),
                                  (True, "tab:purple", "ordered send")):
        points = by_kind.get(ordered)
        if points:
            bottom.scatter([p[0] for p in points], [p[1] for p in points], s=3, alpha=0.4,
                           color=color, label=f"{label} latency (ok)", linewidths=0)
    failed_points = [(op.complete_time, (op.latency or 0) * 1000) for op in send_ops
                     if op.failed and op.complete_time is not None and op.latency]
    if failed_points:
        bottom.scatter([p[0] for p in failed_points], [max(p[1], 0.01) for p in failed_points],
                       s=8, marker="x", color="tab:red", label="failed / unknown send",
                       linewidths=0.8)
    bottom.set_yscale("log")
    bottom.set_ylabel("send latency (ms)")
    bottom.set_xlabel("seconds since the run started")
    if by_kind or failed_points:
        bottom.legend(loc="upper right", fontsize=8, markerscale=3)
    for i, w in enumerate(fault_windows(entries)):
        until = w.until(end)
        for ax in (top, bottom):
            ax.axvspan(w.start, until, color="tab:orange", alpha=0.18, linewidth=0)
        # stacked, so that windows close together keep readable labels
        top.text(w.start, 0.97 - 0.08 * (i % 4),
                 f" #{w.window} {w.name}" + ("" if w.end is not None else " (not healed)"),
                 transform=top.get_xaxis_transform(), fontsize=8, color="saddlebrown",
                 va="top")
    for e in entries:
        if e["f"] == RUN and e["value"].get("phase") in ("drain", "send-phase"):
            for ax in (top, bottom):
                ax.axvline(e["time"], color="grey", linestyle=":", linewidth=0.8)
    run = result.get("run", {})
    q = result["queue"]
    fig.suptitle(f"mqchaos {run.get('scenario', '')} ({run.get('target', '')}): lost "
                 f"{q['lost_count']}, duplicates {q['duplicate_count']}, unexpected "
                 f"{q['unexpected_count']}, order violations "
                 f"{result['order']['violation_count']}", fontsize=10)
    first = min((op.invoke_time for op in send_ops), default=0.0)
    top.set_xlim(max(0.0, first - 1.0), end)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
