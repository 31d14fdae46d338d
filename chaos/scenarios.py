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
    # sample the consumer groups' committed offsets on the masters every second (checked:
    # none goes backwards; redeliveries after a master's kill lie beyond them)
    probe_offsets: bool = False
    send_timeout_s: float | None = None  # the producers' (None: the client's, 3 s)
    # the send phase goes on at least this long after the nemesis's last step (a restart or
    # an await may end later than its share of the duration)
    tail_s: float = 0.0
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


def expect_clients_go_on(result: Result) -> list[str]:
    """Scenario 2: nothing lost; with one name server dead, sends (through routes from the
    other) go on within seconds."""
    out = _queue_problems(result)
    w = _first_window(result)
    if w is None:
        return [*out, "no fault window in the history"]
    for name, r in w["send"].items():
        if name != "all" and (r.get("next_ok_s") is None or r["next_ok_s"] > 5.0):
            out.append(f"{name} sends did not go on within 5 s of the fault: {r}")
    return out


def _awaits(result: Result, condition: str) -> list[dict[str, Any]]:
    return [a for a in result["awaits"]["awaits"] if a["condition"] == condition]


# Scenario 3: a master silent for 120 s (BROKER_CHANNEL_EXPIRED_TIME) is dropped by the name
# servers' scan (every 10 s); it registered at most 30 s (registerNameServerPeriod) before
# the cut. So its route goes 90-130 s after the cut; healed, it registers within 30 s.
ROUTE_GONE_S = (80.0, 150.0)
ROUTE_BACK_S = 45.0


def expect_route_expiry(result: Result) -> list[str]:
    """Scenario 3: nothing lost; the cut-off master leaves the routes after the expiry (not
    at once, not never) and comes back within a registration period of the heal; no
    ordered message out of order within its queue."""
    out = _queue_problems(result)
    # While the master is out of the routes, keys of send_orderly on its queues fail until
    # it is back (they keep their queue while its slave keeps the group in the routes);
    # order across queues is not RocketMQ's promise (reported); within a queue it is.
    if result["order"]["within_queue_count"]:
        out.append(f"{result['order']['within_queue_count']} ordered messages out of order "
                   "within their queue")
    gone, back = _awaits(result, "unlisted"), _awaits(result, "listed")
    if not gone or not gone[0]["met"]:
        out.append(f"the master never left the name servers' routes: {gone}")
    else:
        t = gone[0]["since_fault_start_s"]
        if t is None or not ROUTE_GONE_S[0] <= t <= ROUTE_GONE_S[1]:
            out.append(f"the master left the routes {t} s after the cut, expected "
                       f"{ROUTE_GONE_S[0]:.0f}-{ROUTE_GONE_S[1]:.0f} s (the 120 s expiry)")
    if not back or not back[0]["met"]:
        out.append(f"the master did not come back into the routes after the heal: {back}")
    elif (back[0]["since_fault_end_s"] or 0.0) > ROUTE_BACK_S:
        out.append(f"the master came back {back[0]['since_fault_end_s']} s after the heal, "
                   f"expected within {ROUTE_BACK_S:.0f} s")
    return out


WEAK_ACKS = frozenset({"FLUSH_SLAVE_TIMEOUT", "SLAVE_NOT_AVAILABLE"})


def expect_weak_acks_then_catch_up(result: Result) -> list[str]:
    """Scenario 4: sends to broker-a answered FLUSH_SLAVE_TIMEOUT / SLAVE_NOT_AVAILABLE while
    its slave is frozen (stored on the master: none lost), and the slave catches up after."""
    out = _queue_problems(result)
    q = result["queue"]
    if not WEAK_ACKS & set(q["weak_statuses"]):
        out.append(f"no send answered {' / '.join(sorted(WEAK_ACKS))} while the slave was "
                   f"frozen (weak acks: {q['weak_statuses']})")
    if q["lost_weak_count"]:
        out.append(f"{q['lost_weak_count']} weakly acknowledged messages lost")
    caught = _awaits(result, "caught-up")
    if not caught or not caught[0]["met"]:
        out.append(f"the slave did not catch up after the unpause: {caught}")
    return out


# A restarted master's committed offsets may be older than those it had acknowledged (it
# persists them every 5 s); the consumers' next commit (every 5 s) repairs them.
OFFSET_REPAIR_S = 15.0


def expect_restart_without_loss(result: Result) -> list[str]:
    """Scenario 5: nothing lost after the master's restart; no committed consumer offset
    stays behind where it had been (one the restarted master reloaded older is repaired by
    the consumers' next commit within OFFSET_REPAIR_S); duplicates reported (those below the
    offsets committed before the kill apart) and bounded."""
    out = _queue_problems(result)
    offsets = result["consumer_offsets"]
    if not offsets["samples"]:
        out.append("no committed consumer offsets sampled")
    if offsets["unrepaired_count"]:
        out.append(f"{offsets['unrepaired_count']} committed consumer offsets went backwards "
                   f"and stayed there (first: {offsets['unrepaired'][:3]})")
    if (offsets["longest_repair_s"] or 0.0) > OFFSET_REPAIR_S:
        out.append(f"a committed consumer offset stayed behind for "
                   f"{offsets['longest_repair_s']} s (expected at most {OFFSET_REPAIR_S:.0f} s)")
    if not offsets["redeliveries"]:
        out.append("no offsets committed on the master before its kill")
    # Messages consumed again below the offsets committed before the kill (a consumer given a
    # queue while the answering broker had no offset of the group starts it from its first
    # offset, as RocketMQ does) are reported, not failed; the bound: at most one extra
    # delivery per message of the killed group.
    for r in offsets["redeliveries"]:
        if r["broker_extra_deliveries"] > r["broker_consumed"]:
            out.append(f"{r['broker_extra_deliveries']} extra deliveries of {r['broker']}'s "
                       f"messages, more than its {r['broker_consumed']} messages")
    healed = [w for w in result["recovery"]["windows"] if w["healed"]]
    if not healed:
        out.append("the master was not restarted")
    return out


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
        expect=expect_clients_go_on),
    Scenario(
        "cut-master-registration",
        "3. cut broker-a's master off the name servers only (compose: docker network "
        "disconnect from the registration network; clients and its slave still reach it): "
        "its route goes after the 120 s expiry, and comes back when healed",
        ClusterShape(),
        (Step(0.2, "start", "disconnect", "broker-a-0"),
         Step(0.25, "await", "unlisted", "broker-a-0", timeout_s=ROUTE_GONE_S[1] + 20),
         Step(0.3, "heal", "disconnect", "broker-a-0"),
         Step(0.35, "await", "listed", "broker-a-0", timeout_s=ROUTE_BACK_S + 15)),
        duration_s=15.0, rate=40.0, tail_s=5.0, expect=expect_route_expiry),
    Scenario(
        "pause-slave",
        "4. pause broker-a's slave (SIGSTOP / docker pause) for a third of the send phase: "
        "sends answered FLUSH_SLAVE_TIMEOUT / SLAVE_NOT_AVAILABLE, the slave catches up after",
        ClusterShape(),
        (Step(0.3, "start", "pause", "broker-a-1"), Step(0.65, "heal", "pause", "broker-a-1"),
         Step(0.7, "await", "caught-up", "broker-a-1", timeout_s=60.0)),
        send_timeout_s=6.0, expect=expect_weak_acks_then_catch_up),
    Scenario(
        "kill-restart-master",
        "5. kill -9 broker-a's master, restart it while the producers still send: nothing "
        "lost, no committed offset stays behind, duplicates reported and bounded",
        ClusterShape(),
        (Step(0.25, "start", "kill", "broker-a-0", probe_fall_behind="broker-a"),
         Step(0.5, "heal", "kill", "broker-a-0")),
        probe_offsets=True, tail_s=5.0, expect=expect_restart_without_loss),
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
