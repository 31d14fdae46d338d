"""Scenarios: the cluster a run needs, when which fault starts and heals, the workload's
shape, and what the result must show. The numbers follow issue 15's list.

A step's time is a fraction of the send phase (`--duration`), so a shorter run keeps the
same shape. Faults not healed by a step stay until the send phase ends; then they are healed
when the scenario says so (`heal_at_end`, as Jepsen heals its nemesis before the final
reads) and always when they freeze or cut off a node (pause, disconnect).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

Result = dict[str, Any]


@dataclasses.dataclass(frozen=True)
class ClusterShape:
    """What `mqcluster up` starts for a local run (the compose files decide for compose)."""

    groups: int = 2
    slaves: int = 1
    namesrvs: int = 1
    role: str = "SYNC_MASTER"
    flush: str = "SYNC_FLUSH"

    def mqcluster_args(self) -> list[str]:
        return ["--groups", str(self.groups), "--slaves", str(self.slaves),
                "--namesrvs", str(self.namesrvs), "--role", self.role, "--flush", self.flush]


@dataclasses.dataclass(frozen=True)
class Step:
    """At `at` (a fraction of the send phase): start or heal `fault` on `node`; or (action
    "await") wait until the condition named by `fault` holds for `node` (nemesis.CONDITIONS:
    unlisted, listed, caught-up), at most `timeout_s`. The steps after an await wait for
    it, and the send phase lasts until the last step ran."""

    at: float
    action: str  # "start", "heal" or "await"
    fault: str  # faults.FAULTS; for "await" the condition
    node: str
    probe_fall_behind: str | None = None  # group probed right before the fault starts
    timeout_s: float = 0.0  # "await" only


@dataclasses.dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    shape: ClusterShape
    steps: tuple[Step, ...]
    duration_s: float = 30.0
    heal_at_end: bool = True
    ordered_producers: int = 2
    rate: float = 200.0
    # Consumers keep behind, so that a fault finds a backlog: messages of the broken group
    # still to consume (a message consumed from a master before it died counts as delivered,
    # whether or not its slave had it).
    consume_ratio: float = 0.7
    # sample the plain group's committed offsets on the masters every second (checked:
    # none goes backwards)
    probe_offsets: bool = False
    # problems the result shows for this scenario (empty: as expected)
    expect: Callable[[Result], list[str]] = lambda result: []


def _queue_problems(result: Result, *, lost: bool = True) -> list[str]:
    q = result["queue"]
    out = []
    if lost and q["lost_count"]:
        out.append(f"{q['lost_count']} acknowledged messages lost (first: {q['lost'][:5]})")
    if q["undelivered_count"]:
        out.append(f"{q['undelivered_count']} acknowledged messages still on the brokers were "
                   f"never delivered to the consumer group (first: {q['undelivered'][:5]})")
    if q["unexpected_count"]:
        out.append(f"{q['unexpected_count']} messages consumed that were never sent")
    if q["failed_but_consumed_count"]:
        out.append(f"{q['failed_but_consumed_count']} sends reported failed were consumed")
    if q["acknowledged"] == 0:
        out.append("no send was acknowledged")
    return out


def _first_window(result: Result) -> dict[str, Any] | None:
    windows = result["recovery"]["windows"]
    return windows[0] if windows else None


def expect_failover_without_loss(result: Result) -> list[str]:
    """Scenario 1: nothing acknowledged lost; plain sends go on (on the other group) within
    seconds; consumers read the killed master's group again (from its slave) while it is
    down."""
    out = _queue_problems(result)
    w = _first_window(result)
    if w is None:
        return [*out, "no fault window in the history"]
    plain = w["send"].get("plain", {})
    if plain.get("next_ok_s") is None or plain["next_ok_s"] > 5.0:
        out.append(f"plain sends did not go on within 5 s of the fault: {plain}")
    if plain.get("settled_s") is None or plain["settled_s"] > 10.0:
        out.append(f"plain sends still failed 10 s after the fault: {plain}")
    group = w["node"].rsplit("-", 1)[0]
    if group not in w["consume"]["next_consume_by_group_s"]:
        out.append(f"no message of {group} consumed after the fault began")
    if result["errors_outside_faults"]["count"]:
        out.append(f"{result['errors_outside_faults']['count']} send errors outside the "
                   "fault windows")
    return out


def expect_loss_within_fall_behind(result: Result) -> list[str]:
    """Scenario 6: loss allowed, but only beyond what the slave had acknowledged just before
    the kill."""
    out = _queue_problems(result, lost=False)
    fb = result["fall_behind"]
    if not fb["probes"]:
        out.append("no fall-behind probe before the kill")
    for p in fb["probes"]:
        if not p["valid"]:
            out.append(f"{p['lost_below_slave_ack_count']} lost messages of {p['group']} lie "
                       f"below the slave's acknowledged offset {p['slave_ack_offset']}")
    return out


def expect_nothing_lost(result: Result) -> list[str]:
    return _queue_problems(result)


SCENARIOS: dict[str, Scenario] = {s.name: s for s in [
    Scenario(
        "kill-master-sync",
        "1. kill -9 broker-a's master under SYNC_MASTER + SYNC_FLUSH; it restarts after the "
        "send phase",
        ClusterShape(role="SYNC_MASTER", flush="SYNC_FLUSH"),
        (Step(0.3, "start", "kill", "broker-a-0", probe_fall_behind="broker-a"),),
        expect=expect_failover_without_loss),
    Scenario(
        "kill-namesrv",
        "2. kill -9 one of two name servers; clients go on through the other",
        ClusterShape(namesrvs=2),
        (Step(0.3, "start", "kill", "namesrv-0"),),
        expect=expect_nothing_lost),
    Scenario(
        "pause-slave",
        "4. pause broker-a's slave (SIGSTOP / docker pause) for a third of the send phase",
        ClusterShape(),
        (Step(0.3, "start", "pause", "broker-a-1"), Step(0.65, "heal", "pause", "broker-a-1")),
        expect=expect_nothing_lost),
    Scenario(
        "kill-restart-master",
        "5. kill -9 broker-a's master, restart it while the producers still send",
        ClusterShape(),
        (Step(0.25, "start", "kill", "broker-a-0", probe_fall_behind="broker-a"),
         Step(0.6, "heal", "kill", "broker-a-0")),
        expect=expect_nothing_lost),
    Scenario(
        "kill-master-async",
        "6. kill -9 broker-a's master under ASYNC_MASTER + ASYNC_FLUSH under load; it stays "
        "down, so what its slave lacked is lost",
        ClusterShape(role="ASYNC_MASTER", flush="ASYNC_FLUSH"),
        (Step(0.5, "start", "kill", "broker-a-0", probe_fall_behind="broker-a"),),
        heal_at_end=False, ordered_producers=0, rate=800.0, consume_ratio=0.8,
        expect=expect_loss_within_fall_behind),
    Scenario(
        "kill-master-async-lagging",
        "6b. as 6, but broker-a's slave is frozen first (so it lags), then the master is "
        "killed and the frozen slave too (what sat in its socket buffers is gone); the slave "
        "restarts and serves what it had: the loss must lie beyond its acknowledged offset",
        ClusterShape(role="ASYNC_MASTER", flush="ASYNC_FLUSH"),
        (Step(0.35, "start", "pause", "broker-a-1"),
         Step(0.6, "start", "kill", "broker-a-0", probe_fall_behind="broker-a"),
         Step(0.62, "start", "kill", "broker-a-1"),
         Step(0.7, "heal", "kill", "broker-a-1")),
        heal_at_end=False, ordered_producers=0, rate=400.0, consume_ratio=0.5,
        expect=expect_loss_within_fall_behind),
]}
