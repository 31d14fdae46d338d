"""The figures for people: ratios against the best peer, a text table, a PNG bar chart."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mqclient.cli.output import table as text_table

OURS = "ours"
# workload -> (figure key, label)
WORKLOADS = {
    "one_at_a_time": ("one_at_a_time_msgs_s", "one at a time"),
    "in_flight": ("in_flight_msgs_s", "many in flight"),
    "consume": ("consume_msgs_s", "consume"),
    "many_topics": ("many_topics_msgs_s", "many topics"),
}
# workload -> (ours / best peer wanted, the classes the goal is for)
GOALS: dict[str, tuple[float, tuple[str, ...]]] = {
    "one_at_a_time": (1.5, ("a", "b")),
    "in_flight": (2.0, ("a", "b", "c")),
    "consume": (2.0, ("a", "b", "c")),
}
MANY_TOPICS_FLOOR = 0.9  # ours with many topics against 1 topic: loses at most 10 %


def failed_runs(result: dict[str, Any]) -> list[str]:
    """"peer (class)" of every run that failed."""
    return [f"{p} ({c})" for p, e in result["peers"].items()
            for c, r in e.get("classes", {}).items() if r["status"] == "failed"]


def _figures(result: dict[str, Any], peer: str, cls: str) -> dict[str, float] | None:
    entry = result["peers"].get(peer, {}).get("classes", {}).get(cls)
    return entry["figures"] if entry and entry["status"] == "ok" else None


def ratios(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per class: ours / the best other peer of each workload, with the goal and whether it
    is met; and ours with many topics against 1 topic."""
    out: dict[str, dict[str, Any]] = {}
    for cls in result["classes"]:
        ours = _figures(result, OURS, cls)
        if ours is None:
            continue
        # A peer that failed in this class may have been the best: no goal is judged there.
        failed = [p for p, e in result["peers"].items() if p != OURS
                  and e.get("classes", {}).get(cls, {}).get("status") == "failed"]
        row: dict[str, Any] = {}
        for workload, (key, _) in WORKLOADS.items():
            peers = {p: f[key] for p in result["peers"] if p != OURS
                     and (f := _figures(result, p, cls)) is not None}
            goal, goal_classes = GOALS.get(workload, (None, ()))
            item: dict[str, Any] = {"ours_msgs_s": ours[key], "best_peer": None,
                                    "best_peer_msgs_s": None, "ratio": None,
                                    "goal": goal if cls in goal_classes else None, "met": None,
                                    "failed_peers": failed}
            if peers:
                best = max(peers, key=lambda p: peers[p])
                item.update(best_peer=best, best_peer_msgs_s=peers[best],
                            ratio=ours[key] / peers[best])
                if item["goal"] is not None and not failed:
                    item["met"] = item["ratio"] >= item["goal"]
            row[workload] = item
        row["many_topics_vs_1"] = {"ours": ours["many_topics_vs_1"], "goal": MANY_TOPICS_FLOOR,
                                   "met": ours["many_topics_vs_1"] >= MANY_TOPICS_FLOOR}
        out[cls] = row
    return out


def _num(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _cpu(item: dict[str, float] | None) -> str:
    return "-" if item is None else f"{item['server_us']:,.0f} + {item['client_us']:,.0f}"


def table(result: dict[str, Any]) -> str:
    topics = result["sizes"]["topics"]
    lines = []
    for cls, meaning in result["classes"].items():
        rows = []
        for peer, entry in result["peers"].items():
            if entry["status"] == "skipped":
                rows.append([peer, f"skipped: {entry['reason']}"] + ["-"] * 7)
                continue
            c = entry["classes"].get(cls)
            if c is None:
                continue
            if c["status"] != "ok":
                why = c.get("reason") or c.get("error", "")
                rows.append([peer, f"{c['status']}: {why}"[:90]] + ["-"] * 7)
                continue
            f = c["figures"]
            rows.append([peer, c["setting"], _num(f["one_at_a_time_msgs_s"]),
                         _num(f["one_at_a_time_p50_ms"], 3), _num(f["one_at_a_time_p99_ms"], 3),
                         _num(f["in_flight_msgs_s"]), _num(f["many_topics_msgs_s"]),
                         _num(f["many_topics_vs_1"], 2), _num(f["consume_msgs_s"])])
        if all(row[1].startswith("skipped: ") for row in rows):
            continue  # the class did not run (or no peer did)
        lines.append(f"({cls}) {meaning}")
        lines.append(text_table(["Peer", "Setting", "1-at-a-time/s", "p50 ms", "p99 ms",
                                 "in flight/s", f"{topics} topics/s", f"{topics}/1",
                                 "consume/s"], rows))
        lines.append("")
    rows = []
    for cls in result["classes"]:
        for peer, entry in result["peers"].items():
            cpu = entry.get("classes", {}).get(cls, {}).get("cpu_us_per_message")
            if cpu:
                rows.append([cls, peer] + [_cpu(cpu.get(w)) for w in WORKLOADS])
    if rows:
        lines.append("CPU µs per message: servers + this client (the last round of each load)")
        lines.append(text_table(["Class", "Peer", *(label for _, label in WORKLOADS.values())],
                                rows))
        lines.append("")
    rows = []
    for cls, row in result.get("ratios", {}).items():
        for workload, (_, label) in WORKLOADS.items():
            item = row[workload]
            met = {True: "yes", False: "NO", None: "-"}[item["met"]]
            if item["goal"] is not None and item.get("failed_peers"):
                met = f"? ({', '.join(item['failed_peers'])} failed)"
            rows.append([cls, label, _num(item["ours_msgs_s"]), item["best_peer"] or "-",
                         _num(item["best_peer_msgs_s"]), _num(item["ratio"], 2),
                         _num(item["goal"], 1), met])
        item = row["many_topics_vs_1"]
        rows.append([cls, f"ours {topics} topics / 1", "-", "-", "-", _num(item["ours"], 2),
                     _num(item["goal"], 1), "yes" if item["met"] else "NO"])
    if rows:
        skipped = [p for p, e in result["peers"].items() if e["status"] == "skipped"]
        lines.append("Ours against the best peer (same run, msgs/s)" + (
            f"; left out, not installed: {', '.join(skipped)}" if skipped else ""))
        lines.append(text_table(["Class", "Workload", "Ours", "Best peer", "Its msgs/s",
                                 "Ratio", "Goal", "Met"], rows))
    return "\n".join(lines).rstrip()


def chart(result: dict[str, Any], path: Path) -> None:
    """Bars of ours / best peer per workload and class, the goals as dashes; beside them
    ours with many topics against 1 topic."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    topics = result["sizes"]["topics"]
    rats = result.get("ratios", {})
    classes = list(rats)
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(12, 5),
                                  gridspec_kw={"width_ratios": [3, 1]})
    names = list(WORKLOADS)
    width = 0.8 / max(1, len(classes))
    for k, cls in enumerate(classes):
        xs, ys, labels = [], [], []
        for i, workload in enumerate(names):
            item = rats[cls][workload]
            if item["ratio"] is not None:
                xs.append(i + (k - (len(classes) - 1) / 2) * width)
                ys.append(item["ratio"])
                labels.append(f"{item['ratio']:.2f}\n{item['best_peer']}")
        bars = ax.bar(xs, ys, width, label=f"({cls}) {result['classes'][cls]}")
        ax.bar_label(bars, labels=labels, fontsize=7)
    for i, workload in enumerate(names):  # each goal over the bars of its classes only
        goal, goal_classes = GOALS.get(workload, (None, ()))
        for k, cls in enumerate(classes):
            if goal is not None and cls in goal_classes:
                x = i + (k - (len(classes) - 1) / 2) * width
                ax.hlines(goal, x - width / 2, x + width / 2, colors="black",
                          linestyles="dashed", linewidth=1)
    ax.axhline(1.0, color="grey", linewidth=0.8)
    ax.set_xticks(range(len(names)),
                  [WORKLOADS[w][1] + (f"\n({topics} topics)" if w == "many_topics" else "")
                   for w in names])
    ax.set_ylabel("ours / best peer named (msgs/s)")
    ax.set_ylim(0, ax.get_ylim()[1] * 1.08)  # room for the labels
    skipped = [p for p, e in result["peers"].items() if e["status"] == "skipped"]
    failed = failed_runs(result)
    ax.set_title("Ours against the best peer, same run (dashes: goals)" + (
        f"\nleft out, not installed: {', '.join(skipped)}" if skipped else "") + (
        f"\nincomplete, failed: {', '.join(failed)}" if failed else ""))
    if classes:
        ax.legend(fontsize=8, loc="upper left")
    values = [rats[c]["many_topics_vs_1"]["ours"] for c in classes]
    bars = ax2.bar([f"({c})" for c in classes], values, color="tab:purple")
    ax2.bar_label(bars, fmt="%.2f", fontsize=8)
    ax2.axhline(MANY_TOPICS_FLOOR, color="black", linestyle="dashed", linewidth=1)
    ax2.set_ylim(0, max([1.1, *values]) * 1.1)
    ax2.set_title(f"Ours: {topics} topics / 1 topic")
    machine = result["machine"]
    fig.suptitle(f"bench.peers {result['started']} — {machine['cpu_model']}, "
                 f"{machine['cores']} cores" + (" (quick run)" if result["quick"] else ""),
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
