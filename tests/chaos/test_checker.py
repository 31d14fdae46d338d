"""The checkers on small hand-written histories: each finding shows up where it must and
nowhere else."""

from __future__ import annotations

import pytest

from chaos.checker import (
    check,
    check_awaits,
    check_consumer_offsets,
    check_errors_outside_faults,
    check_loss_within_fall_behind,
    check_order,
    check_queue,
    check_recovery,
)
from chaos.operations import fault_windows, operations
from chaos.scenarios import expect_route_expiry, expect_weak_acks_then_catch_up
from tests.chaos.histories import (
    awaited,
    consume,
    failed,
    fault,
    invoke,
    offsets,
    ok,
    probe,
    sent,
)


def test_a_clean_history_is_valid() -> None:
    h = [*sent(1.0, 1.1, "p0", "k", 0), *sent(1.2, 1.3, "p0", "k", 1),
         consume(1.4, "k", 0), consume(1.5, "k", 1)]
    result = check(h)
    q = result["queue"]
    assert (q["attempted"], q["acknowledged"], q["consumed_distinct"]) == (2, 2, 2)
    assert q["lost_count"] == q["duplicate_count"] == q["unexpected_count"] == 0
    assert result["valid"] and q["at_least_once"] and q["at_most_once"]


def test_acknowledged_but_never_consumed_is_lost() -> None:
    h = [*sent(1.0, 1.1, "p0", "k", 0), *sent(1.2, 1.3, "p0", "k", 1),
         *sent(1.4, 1.5, "p0", "k", 2), consume(2.0, "k", 0), consume(2.1, "k", 2)]
    q = check_queue(h)
    assert q["lost_count"] == 1 and q["lost"] == ["k#1"]
    assert not q["valid"] and not q["at_least_once"]
    assert not check(h)["valid"]


def test_failed_and_timed_out_sends_are_unknown_consumed_or_not() -> None:
    h = [invoke(1.0, "p0", "k", 0), failed(4.0, "p0", "k", 0, error="TIMEOUT"),
         invoke(4.1, "p0", "k", 1), failed(4.2, "p0", "k", 1, error="SEND_FAILED"),
         invoke(4.3, "p0", "k", 2),  # never completed (the run ended)
         consume(5.0, "k", 0)]
    q = check_queue(h)
    assert q["unknown"] == 3 and q["lost_count"] == 0
    assert q["recovered_count"] == 1 and q["recovered"] == ["k#0"]  # timed out, stored anyway
    assert q["unknown_not_consumed"] == 2
    assert q["valid"]


def test_a_send_reported_failed_for_certain_but_consumed_is_flagged() -> None:
    h = [invoke(1.0, "p0", "k", 0), failed(1.1, "p0", "k", 0, error="ILLEGAL_ARGUMENT",
                                           type_="fail"),
         consume(2.0, "k", 0)]
    q = check_queue(h)
    assert q["failed_but_consumed"] == ["k#0"] and not q["valid"]


def test_duplicates_are_counted_per_message() -> None:
    h = [*sent(1.0, 1.1, "p0", "k", 0), *sent(1.2, 1.3, "p0", "k", 1),
         *sent(1.4, 1.5, "p0", "k", 2),
         consume(2.0, "k", 0), consume(2.1, "k", 0), consume(2.2, "k", 1),
         consume(2.3, "k", 1), consume(2.4, "k", 1), consume(2.5, "k", 2)]
    q = check_queue(h)
    assert q["duplicates"] == {"k#0": 2, "k#1": 3}
    assert q["duplicate_count"] == 2 and q["duplicate_deliveries"] == 3
    assert q["duplicate_histogram"] == {"2": 1, "3": 1}
    assert q["valid"] and not q["at_most_once"]  # at-least-once allows duplicates


def test_consumed_but_never_sent_is_unexpected() -> None:
    h = [*sent(1.0, 1.1, "p0", "k", 0), consume(2.0, "k", 0), consume(2.1, "other", 7)]
    q = check_queue(h)
    assert q["unexpected"] == ["other#7"] and not q["valid"]


def test_weak_acknowledgements_are_reported_apart() -> None:
    """FLUSH_SLAVE_TIMEOUT: stored on the master only; not consumed is not `lost`."""
    h = [*sent(1.0, 1.1, "p0", "k", 0, status="FLUSH_SLAVE_TIMEOUT"),
         *sent(1.2, 1.3, "p0", "k", 1, status="SLAVE_NOT_AVAILABLE"), consume(2.0, "k", 1)]
    q = check_queue(h)
    assert q["acknowledged"] == 0 and q["acknowledged_weak"] == 2
    assert q["weak_statuses"] == {"FLUSH_SLAVE_TIMEOUT": 1, "SLAVE_NOT_AVAILABLE": 1}
    assert q["lost_count"] == 0 and q["lost_weak"] == ["k#0"]


def test_order_violation_is_a_first_delivery_after_a_later_one() -> None:
    h = [*sent(1.0, 1.1, "p0", "k", 0, ordered=True), *sent(1.2, 1.3, "p0", "k", 1, ordered=True),
         *sent(1.4, 1.5, "p0", "k", 2, ordered=True),
         consume(2.0, "k", 0), consume(2.1, "k", 2), consume(2.2, "k", 1)]
    o = check_order(h)
    assert o["violation_count"] == 1 and not o["valid"]
    assert o["violations"][0] | {"time": 0} == {
        "key": "k", "seq": 1, "after_seq": 2, "time": 0, "process": "consumer-0",
        "queue": "broker-a-0", "after_queue": "broker-a-0"}
    assert o["keys_with_violations"] == {"k": 1}
    assert (o["within_queue_count"], o["across_queues_count"]) == (1, 0)
    assert not check(h)["valid"]


def test_order_violations_across_queues_are_told_apart() -> None:
    """The key moved to broker-b's queue 3 (its route lost broker-a), then back: k#2 came
    from broker-b before k#1, still waiting on broker-a, was consumed."""
    h = [*(e for i in range(3) for e in sent(1.0 + i, 1.1 + i, "p0", "k", i, ordered=True)),
         consume(2.0, "k", 0), consume(2.1, "k", 2, broker="broker-b", queue=3),
         consume(2.2, "k", 1)]
    o = check_order(h)
    assert (o["violation_count"], o["within_queue_count"], o["across_queues_count"]) == (1, 0, 1)
    assert o["violations"][0]["after_queue"] == "broker-b-3" and not o["valid"]


def test_redeliveries_and_gaps_are_not_order_violations() -> None:
    """A consumer rewound to an older offset delivers 0, 1 again (duplicates, in order);
    a missing sequence number is check_queue's business."""
    h = [*sent(1.0, 1.1, "p0", "k", 0, ordered=True), *sent(1.2, 1.3, "p0", "k", 1, ordered=True),
         invoke(1.4, "p0", "k", 2, ordered=True), failed(1.5, "p0", "k", 2),
         *sent(1.6, 1.7, "p0", "k", 3, ordered=True),
         consume(2.0, "k", 0), consume(2.1, "k", 1), consume(2.2, "k", 0), consume(2.3, "k", 1),
         consume(2.4, "k", 3)]
    assert check_order(h)["violation_count"] == 0


def test_order_is_checked_only_for_ordered_keys() -> None:
    h = [*sent(1.0, 1.1, "p0", "plain", 0), *sent(1.2, 1.3, "p0", "plain", 1),
         consume(2.0, "plain", 1), consume(2.1, "plain", 0)]
    o = check_order(h)
    assert o["keys_checked"] == 0 and o["violation_count"] == 0


def test_operations_pair_invocations_per_process() -> None:
    h = [invoke(1.0, "p0", "a", 0), invoke(1.1, "p1", "b", 0), ok(1.5, "p1", "b", 0),
         failed(2.0, "p0", "a", 0), invoke(2.1, "p1", "b", 1)]
    ops = {op.id: op for op in operations(h, "send")}
    assert (ops["a#0"].invoke_time, ops["a#0"].complete_time, ops["a#0"].type) == (
        1.0, 2.0, "info")
    assert ops["b#0"].ok and ops["b#0"].latency == pytest.approx(0.4)
    assert ops["b#1"].type is None and ops["b#1"].complete_time is None


def test_recovery_times_of_a_fault_window() -> None:
    h = [*sent(9.0, 9.1, "p0", "pa", 0), consume(9.2, "pa", 0),
         fault(10.0, "start"),
         invoke(10.2, "p0", "pa", 1), failed(10.5, "p0", "pa", 1, error="SEND_FAILED"),
         *sent(10.6, 11.0, "p0", "pa", 2, broker="broker-b"),
         *sent(11.1, 11.2, "p0", "pa", 3, broker="broker-b"),
         consume(10.3, "pa", 0, broker="broker-a"),  # a redelivery from the slave
         consume(12.5, "pa", 2, broker="broker-b"),
         fault(20.0, "end"), consume(20.5, "pa", 3, broker="broker-b")]
    [w] = check_recovery(h)["windows"]
    assert (w["start"], w["end"], w["duration_s"], w["healed"]) == (10.0, 20.0, 10.0, True)
    plain = w["send"]["plain"]
    assert plain["failures"] == 1 and plain["first_failure_s"] == 0.5
    assert plain["next_ok_s"] == 1.0  # the first send invoked after the fault that was ok
    assert plain["unavailable_s"] == 0.8  # from the failed attempt's start to the next ok
    assert plain["settled_s"] == 1.0
    assert "ordered" not in w["send"]
    c = w["consume"]
    assert c["next_consume_s"] == 0.3
    assert c["next_consume_of_new_send_s"] == 2.5
    assert c["next_consume_by_group_s"] == {"broker-a": 0.3, "broker-b": 2.5}


def test_an_ordered_key_that_never_recovers_is_not_settled() -> None:
    """Keys on the killed group fail for the whole window while others go on."""
    h = [fault(10.0, "start"),
         invoke(10.1, "o0", "ka", 0, ordered=True), failed(10.2, "o0", "ka", 0),
         *sent(10.3, 10.4, "o0", "kb", 0, ordered=True, broker="broker-b"),
         invoke(10.5, "o0", "ka", 1, ordered=True), failed(10.6, "o0", "ka", 1),
         *sent(10.7, 10.8, "o0", "kb", 1, ordered=True, broker="broker-b")]
    [w] = check_recovery(h)["windows"]
    ordered = w["send"]["ordered"]
    assert ordered["failures"] == 2 and ordered["keys_failed"] == 1
    assert ordered["keys_not_recovered"] == 1 and ordered["settled_s"] is None
    assert ordered["next_ok_s"] == 0.4
    assert w["end"] is None and not w["healed"]  # open until the history ends
    assert w["duration_s"] == 0.8


def test_a_key_outage_ends_at_its_next_ok() -> None:
    h = [fault(10.0, "start"),
         invoke(10.1, "o0", "ka", 0, ordered=True), failed(10.2, "o0", "ka", 0),
         *sent(13.1, 13.2, "o0", "ka", 1, ordered=True), fault(14.0, "end")]
    ordered = check_recovery(h)["windows"][0]["send"]["ordered"]
    assert ordered["keys_not_recovered"] == 0
    assert ordered["longest_key_outage_s"] == 3.1  # 10.1 -> 13.2
    assert ordered["settled_s"] == 3.2


def test_errors_outside_fault_windows() -> None:
    h = [invoke(1.0, "p0", "k", 0), failed(1.5, "p0", "k", 0, error="TIMEOUT"),
         fault(5.0, "start"), invoke(5.5, "p0", "k", 1), failed(6.0, "p0", "k", 1),
         invoke(7.5, "p0", "k", 2), failed(8.5, "p0", "k", 2),  # began inside, ended after
         fault(8.0, "end"),
         invoke(9.0, "p0", "k", 3), failed(9.5, "p0", "k", 3, error="SEND_FAILED")]
    e = check_errors_outside_faults(h)
    assert e["count"] == 2 and {x["id"] for x in e["examples"]} == {"k#0", "k#3"}
    assert e["by_error"] == {"TIMEOUT": 1, "SEND_FAILED": 1}
    assert not e["valid"]


def test_fault_windows_pair_start_and_end_by_window() -> None:
    h = [fault(1.0, "start", window=1), fault(2.0, "start", window=2, name="pause",
                                              node="broker-a-1"),
         fault(3.0, "end", window=2, name="pause", node="broker-a-1")]
    w1, w2 = fault_windows(h)
    assert (w1.window, w1.start, w1.end) == (1, 1.0, None)
    assert (w2.window, w2.name, w2.start, w2.end) == (2, "pause broker-a-1", 2.0, 3.0)


def test_loss_within_the_fall_behind_reported_before_the_kill() -> None:
    h = [*sent(1.0, 1.1, "p0", "k", 0, offset=900), *sent(1.2, 1.3, "p0", "k", 1, offset=1000),
         *sent(1.4, 1.5, "p0", "k", 2, offset=1100), probe(2.0, ack=1000, top=1200),
         *sent(2.1, 2.2, "p0", "k", 3, offset=1200), fault(2.3, "start"),
         *sent(2.4, 2.5, "p0", "k", 4, broker="broker-b", offset=50),
         consume(3.0, "k", 0), consume(3.1, "k", 4)]
    [p] = check_loss_within_fall_behind(h)["probes"]
    assert p["fall_behind_bytes"] == 200 and p["behind_messages"] == 2  # offsets 1000, 1100
    assert p["written_after_probe"] == 1  # offset 1200
    assert (p["lost_messages"], p["lost_within_reported"], p["lost_after_probe"]) == (3, 2, 1)
    assert p["lost_bytes_estimate"] == 300 and p["valid"]
    result = check(h)
    assert result["fall_behind"]["valid"] and not result["queue"]["valid"]


def test_loss_below_the_slaves_acknowledged_offset_is_a_violation() -> None:
    h = [*sent(1.0, 1.1, "p0", "k", 0, offset=900), *sent(1.2, 1.3, "p0", "k", 1, offset=1000),
         probe(2.0, ack=1000, top=1100), fault(2.3, "start"), consume(3.0, "k", 1)]
    fb = check_loss_within_fall_behind(h)
    assert fb["probes"][0]["lost_below_slave_ack"] == ["k#0"] and not fb["valid"]


def test_probes_not_taken_before_a_fault_are_ignored() -> None:
    h = [*sent(1.0, 1.1, "p0", "k", 0, offset=900),
         {**probe(2.0, ack=1000, top=1100), "value": {
             **probe(2.0, ack=1000, top=1100)["value"], "before_window": None}}]
    assert check_loss_within_fall_behind(h)["probes"] == []


def test_fall_behind_counts_what_the_dying_master_acknowledged_until_it_was_seen_dead(
        ) -> None:
    """k#1 was acknowledged after the kill began (docker kill takes a moment), before the
    node was seen dead: written after the probe, lost, and within the rule."""
    applied = {"time": 2.5, "process": "nemesis", "type": "info", "f": "fault",
               "value": {"phase": "applied", "fault": "kill", "node": "broker-a-0",
                         "window": 1}}
    h = [*sent(1.0, 1.1, "p0", "k", 0, offset=900), probe(2.0, ack=1000, top=1000),
         fault(2.3, "start"), *sent(2.31, 2.4, "p0", "k", 1, offset=1000), applied,
         consume(6.5, "k", 0)]
    [p] = check_loss_within_fall_behind(h)["probes"]
    assert (p["written_after_probe"], p["lost_messages"], p["lost_after_probe"]) == (1, 1, 1)
    assert p["valid"] and check_queue(h)["lost"] == ["k#1"]
    [p] = check_loss_within_fall_behind([e for e in h if e is not applied])["probes"]
    assert p["lost_messages"] == 0  # without the applied entry: up to the fault's start


def test_fall_behind_counts_an_answer_that_arrived_after_the_kill_was_seen() -> None:
    """k#1 was sent before the kill and written by the dying master, whose answer reached
    the client only after the node was seen dead: lost, and counted by the probe too."""
    applied = {"time": 2.5, "process": "nemesis", "type": "info", "f": "fault",
               "value": {"phase": "applied", "fault": "kill", "node": "broker-a-0",
                         "window": 1}}
    h = [*sent(1.0, 1.1, "p0", "k", 0, offset=900), probe(2.0, ack=1000, top=1000),
         fault(2.3, "start"), invoke(2.4, "p0", "k", 1), applied,
         ok(2.6, "p0", "k", 1, offset=1000), consume(6.5, "k", 0)]
    [p] = check_loss_within_fall_behind(h)["probes"]
    assert (p["lost_messages"], p["lost_after_probe"]) == (1, 1) and p["valid"]
    assert check_queue(h)["lost"] == ["k#1"]


def test_fall_behind_counts_only_what_was_acknowledged_before_the_fault() -> None:
    """A master restarted after the kill writes on at higher offsets: not 'after the probe'."""
    h = [*sent(1.0, 1.1, "p0", "k", 0, offset=900), probe(2.0, ack=1000, top=1000),
         fault(2.3, "start"), fault(5.0, "end"),
         *sent(6.0, 6.1, "p0", "k", 1, offset=1500), consume(6.5, "k", 0)]
    [p] = check_loss_within_fall_behind(h)["probes"]
    assert p["written_after_probe"] == 0 and p["lost_messages"] == 0
    assert check_queue(h)["lost"] == ["k#1"]  # the queue checker still sees it


def test_redeliveries_are_told_apart_by_phase() -> None:
    run = [{"time": t, "process": "runner", "type": "info", "f": "run",
            "value": {"phase": phase}} for t, phase in ((20.0, "drain"), (30.0, "drained"))]
    h = [*sent(1.0, 1.1, "p0", "k", 0), consume(2.0, "k", 0), consume(3.0, "k", 0),
         fault(10.0, "start"), consume(11.0, "k", 0), fault(12.0, "end"), *run,
         consume(25.0, "k", 0), consume(30.5, "k", 0), consume(30.6, "k", 0)]
    q = check_queue(h)
    assert q["duplicate_deliveries"] == 5
    assert q["duplicate_deliveries_by_phase"] == {"send phase": 1, "fault windows": 1,
                                                  "drain": 1, "shutdown": 2}


def test_committed_offsets_going_backwards_are_found_per_master_and_queue() -> None:
    h = [offsets(1.0, {"T/0": 5, "T/1": 3}), offsets(2.0, {"T/0": 7, "T/1": 3}),
         offsets(2.0, {"T/0": 1}, broker="broker-b", addr="b:1"),  # another master
         offsets(3.0, {"T/0": 6, "T/1": 4}),  # T/0 of broker-a: 7 -> 6
         offsets(4.0, {"T/0": 6, "T/1": 4})]
    r = check_consumer_offsets(h)
    assert (r["samples"], r["queues"], r["backwards_count"]) == (9, 3, 1)
    assert r["backwards"][0] == {
        "addr": "127.0.0.1:10911", "broker": "broker-a", "group": "G", "queue": "T/0",
        "from": 7, "to": 6, "time": 3.0, "previous_sample_time": 2.0,
        "repaired_after_s": None}
    assert r["unrepaired_count"] == 1 and r["max_backwards_messages"] == 1
    assert not r["valid"] and not check(h)["valid"]
    assert check_consumer_offsets(h[:3])["valid"]
    # The consumers' next commit puts it back: a regression reported, repaired after 2 s.
    repaired = check_consumer_offsets([*h, offsets(5.0, {"T/0": 8, "T/1": 4})])
    assert repaired["backwards_count"] == 1 and repaired["unrepaired_count"] == 0
    assert repaired["longest_repair_s"] == 2.0 and repaired["valid"]


def test_redeliveries_after_a_kill_must_lie_beyond_the_committed_offsets() -> None:
    """Committed 2 on T/0 before the kill: k#2 and k#3 (offsets 2, 3) may come again, k#1
    (offset 1) may not."""
    before = [offsets(1.0, {"T/0": 2}),
              *(consume(0.5 + i / 10, "k", i, queue_offset=i) for i in range(4))]
    again = [fault(2.0, "start"), consume(3.0, "k", 3, queue_offset=3),
             consume(3.1, "k", 2, queue_offset=2), fault(4.0, "end")]
    [r] = check_consumer_offsets([*before, *again])["redeliveries"]
    assert (r["consumed_before_fault"], r["uncommitted_at_fault"], r["redelivered"]) == (4, 2, 2)
    assert r["valid"] and r["redelivered_below_committed_count"] == 0
    [r] = check_consumer_offsets([*before, *again, consume(3.2, "k", 1, queue_offset=1)]
                                 )["redeliveries"]
    assert not r["valid"] and r["redelivered_below_committed"] == ["k#1"]


def test_awaits_are_reported_and_scenario_3_judges_the_expiry_by_them() -> None:
    h = [fault(10.0, "start", name="disconnect"), awaited(130.0, "unlisted", since_start=120.0),
         fault(131.0, "end", name="disconnect"), awaited(150.0, "listed", since_end=19.0)]
    result = check(h)
    assert [a["condition"] for a in result["awaits"]["awaits"]] == ["unlisted", "listed"]
    assert result["awaits"]["valid"]
    too_soon = check([*h[:1], awaited(20.0, "unlisted", since_start=10.0), *h[2:]])
    never_back = check([*h[:3], awaited(200.0, "listed", met=False)])
    assert not never_back["awaits"]["valid"] and not never_back["valid"]
    assert check_awaits(h)["valid"]
    assert any("expected 80-150 s" in p for p in expect_route_expiry(too_soon))
    assert any("did not come back" in p for p in expect_route_expiry(never_back))
    assert not [p for p in expect_route_expiry(result) if "route" in p or "back" in p]


def test_scenario_4_wants_weak_acks_and_the_slave_caught_up() -> None:
    h = [*sent(1.0, 4.1, "p0", "k", 0, status="FLUSH_SLAVE_TIMEOUT"), consume(5.0, "k", 0),
         *sent(0.1, 0.2, "p0", "k", 1), consume(0.3, "k", 1),
         fault(0.5, "start", name="pause", node="broker-a-1"),
         fault(6.0, "end", name="pause", node="broker-a-1"),
         awaited(8.0, "caught-up", node="broker-a-1", since_end=2.0)]
    assert expect_weak_acks_then_catch_up(check(h)) == []
    plain = [*sent(1.0, 1.1, "p0", "k", 0), consume(5.0, "k", 0), *h[5:7],
             awaited(60.0, "caught-up", node="broker-a-1", met=False)]
    problems = expect_weak_acks_then_catch_up(check(plain))
    assert any("FLUSH_SLAVE_TIMEOUT" in p for p in problems)
    assert any("did not catch up" in p for p in problems)
