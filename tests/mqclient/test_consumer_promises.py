"""What a push consumer promises under rebalance, shutdown and slow listeners (issue 17),
against real name server and broker processes: bounded shutdown, per-message checks of a
dropped queue, the shutdown order, size-based flow control, orderly exclusion while a queue
moves, max_reconsume_times=0, the broadcasting offsets file lock, and admin offset resets."""

from __future__ import annotations

import asyncio
import logging
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from mqclient import (
    ConsumeFromWhere,
    ConsumeStatus,
    Message,
    MessageExt,
    MessageModel,
    MessageQueue,
    MQClientError,
    Producer,
    PushConsumer,
)
from mqclient.admin import MQAdmin
from mqclient.admin_types import AdminError
from mqclient.cli import mqadmin
from mqclient.rebalance import LOCK_UNREACHABLE_WAIT_S, Rebalancer
from tests.mqclient.conftest import Cluster
from tests.mqclient.test_consumer import Collector, create_topic, start_consumer
from tests.support.processes import REPO_ROOT, child_env, stop_process
from tests.support.waiting import wait_until

FIRST = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
TIMEOUT_S = 30.0


def test_shutdown_is_not_lost_when_a_rebalance_is_requested_as_it_starts(
        cluster: Cluster, consumers: list[PushConsumer]) -> None:
    """The hang of issue 17 item 3: a membership event sets the rebalance event in the same
    loop iteration in which shutdown cancels the rebalance loop. With Python 3.11's
    asyncio.wait_for the cancellation was swallowed, the loop went on forever and shutdown
    waited for it without a bound."""
    cluster.start_broker("broker-a")
    create_topic(cluster, "TopicHang", 2).shutdown()
    c = start_consumer(consumers, cluster, Collector().listener("a"), "TopicHang",
                       consume_from_where=FIRST)
    time.sleep(0.5)  # the rebalance loop waits for its event now

    async def race() -> None:
        c.rebalance_immediately()  # the waiting task completes in the next iteration ...
        await asyncio.sleep(0)
        await c._shutdown()  # ... the one in which shutdown cancels the loop

    consumers.remove(c)
    c.started = False
    started = time.monotonic()
    c.loop.run(asyncio.wait_for(race(), 20))
    c.executor.shutdown(wait=False, cancel_futures=True)
    assert time.monotonic() - started < 15


def test_max_reconsume_times_zero_sends_a_failed_message_to_the_dlq_at_once(
        cluster: Cluster, consumers: list[PushConsumer]) -> None:
    """Item 6: 0 is a limit (the first failure goes to %DLQ%), -1 the default (16)."""
    cluster.start_broker("broker-a", messageDelayLevel=" ".join(["1s"] * 18))
    producer = create_topic(cluster, "TopicZero", 1)
    tries: list[int] = []

    def listener(msgs: list[MessageExt]) -> ConsumeStatus:
        tries.extend(m.reconsume_times for m in msgs if m.body == b"poison")
        return (ConsumeStatus.RECONSUME_LATER if msgs[0].body == b"poison"
                else ConsumeStatus.CONSUME_SUCCESS)

    start_consumer(consumers, cluster, listener, "TopicZero", consume_from_where=FIRST,
                   max_reconsume_times=0)
    try:
        producer.send(Message("TopicZero", b"poison", keys=["poison"]))
    finally:
        producer.shutdown()
    with MQAdmin(cluster.namesrv_addr) as admin:
        wait_until(lambda: any(s.max_offset == 1 for s in _status(admin, "%DLQ%CG")),
                   timeout=TIMEOUT_S, message=f"the message in the DLQ (tries {tries})")
        [dead] = admin.query_msg_by_key("%DLQ%CG", "poison")
        assert dead.reconsume_times == 1
    time.sleep(1.5)  # a retry (1 s delay level) would be back by now
    assert tries == [0]


def _status(admin: MQAdmin, topic: str) -> list[Any]:
    try:
        return admin.topic_status(topic)
    except AdminError:
        return []  # the DLQ topic does not exist yet


class Tracker:
    """Listeners of several consumers of one group: every delivery by body, and the calls
    that started on a queue their consumer no longer owned (not in its process queues, nor
    still held under its lock until its final commit)."""

    def __init__(self, sleep_s: float) -> None:
        self.sleep_s = sleep_s
        self.lock = threading.Lock()
        self.bodies: Counter[bytes] = Counter()
        self.unowned: list[tuple[str, int]] = []
        # (consumer, queue) -> messages in its listener calls now; their sum over the
        # queues a consumer gave up, taken as it gave each up (the messages in flight at
        # the handovers)
        self.running: Counter[tuple[str, MessageQueue]] = Counter()
        self.in_flight_at_handovers = 0
        self.finishing = 0

    def listener(self, holder: list[PushConsumer]):  # type: ignore[no-untyped-def]
        def consume(msgs: list[MessageExt]) -> ConsumeStatus:
            rebalancer = holder[0].rebalancer if holder else None
            key = (holder[0].client_id if holder else "", msgs[0].message_queue)
            with self.lock:
                self.running[key] += len(msgs)
            for m in msgs:
                if rebalancer is None or m.message_queue in rebalancer.process_queues:
                    continue
                with self.lock:
                    if m.message_queue in rebalancer.releasing:
                        # Given up, still under its lock: a call filling a gap below one
                        # in progress, before the final commit and unlock.
                        self.finishing += 1
                    else:
                        self.unowned.append((str(m.message_queue), m.queue_offset))
            time.sleep(self.sleep_s)
            with self.lock:
                self.running[key] -= len(msgs)
                for m in msgs:
                    self.bodies[m.body] += 1
            return ConsumeStatus.CONSUME_SUCCESS
        return consume

    def start(self, consumers: list[PushConsumer], cluster: Cluster, topic: str,
              **kw: object) -> PushConsumer:
        holder: list[PushConsumer] = []
        c = start_consumer(consumers, cluster, self.listener(holder), topic,
                           consume_from_where=FIRST, **kw)
        holder.append(c)
        rebalancer = c.rebalancer
        assert rebalancer is not None
        remove_queue = rebalancer.remove_queue

        async def counting_remove_queue(mq: MessageQueue) -> None:
            with self.lock:
                self.in_flight_at_handovers += self.running[(c.client_id, mq)]
            await remove_queue(mq)

        rebalancer.remove_queue = counting_remove_queue  # type: ignore[method-assign]
        return c

    def consumed(self, prefix: bytes) -> int:
        with self.lock:
            return sum(1 for b in self.bodies if b.startswith(prefix))

    def duplicates(self, prefix: bytes) -> int:
        with self.lock:
            return sum(n - 1 for b, n in self.bodies.items() if b.startswith(prefix))


def send_backlog(cluster: Cluster, topic: str, n: int, size: int = 16) -> None:
    with Producer("PG", cluster.namesrv_addr) as producer:
        for start in range(0, n, 50):
            producer.send_batch([Message(topic, b"m%d-" % i + b"x" * size)
                                 for i in range(start, min(n, start + 50))])


def test_a_queue_handed_over_is_not_consumed_further_by_its_old_owner(
        cluster: Cluster, consumers: list[PushConsumer]) -> None:
    """Item 1: with a backlog buffered and consumers joining and leaving, a consumer starts
    no listener call on a queue it no longer owns (before: it worked through its whole
    buffer of the queue while the new owner consumed the same messages), and at most the
    messages in flight at the handovers are delivered twice."""
    cluster.start_broker("broker-a")
    create_topic(cluster, "TopicStorm", 8).shutdown()
    n = 5000
    send_backlog(cluster, "TopicStorm", n)
    tracker = Tracker(0.01)
    for _ in range(2):
        tracker.start(consumers, cluster, "TopicStorm")
    time.sleep(1.0)  # the buffers fill
    for _ in range(4):  # the storm: a third consumer joins and leaves
        joining = tracker.start(consumers, cluster, "TopicStorm")
        time.sleep(0.8)
        consumers.remove(joining)
        joining.shutdown()
        time.sleep(0.5)
    wait_until(lambda: tracker.consumed(b"m") == n, timeout=60,
               message=f"the backlog consumed ({tracker.consumed(b'm')} of {n})")
    print(f"storm: {tracker.duplicates(b'm')} duplicates of {n}, "
          f"{tracker.in_flight_at_handovers} messages in flight at handovers, "
          f"{tracker.finishing} gap fillers on queues given up before their final commit, "
          f"{len(tracker.unowned)} calls on queues no longer owned")
    # A call may start just before its queue is dropped and look unowned to the listener
    # (a window of microseconds); before the fix there were hundreds.
    assert len(tracker.unowned) <= 2, tracker.unowned[:20]
    # The handover under the queue's broker lock: the new owner reads the offset the old
    # one committed after its calls in progress ended (before: 250-500 duplicates).
    assert tracker.duplicates(b"m") <= tracker.in_flight_at_handovers


def test_a_queue_whose_broker_does_not_answer_lock_requests_is_consumed_after_a_bound(
        cluster: Cluster, consumers: list[PushConsumer], monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """Concurrent listeners lock a queue before taking it; when its broker cannot be
    reached for that (say the queue is read from a slave while the master is down), the
    queue is consumed without the lock after LOCK_UNREACHABLE_WAIT_S, with a log line,
    instead of never."""
    cluster.start_broker("broker-a")
    create_topic(cluster, "TopicNoLock", 2).shutdown()
    send_backlog(cluster, "TopicNoLock", 20)

    async def unreachable(self: Rebalancer, mqs: list[MessageQueue]
                          ) -> tuple[set[MessageQueue], set[MessageQueue]]:
        return set(), set(mqs)

    monkeypatch.setattr(Rebalancer, "_lock_batch", unreachable)
    tracker = Tracker(0.0)
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="mqclient.rebalance"):
        tracker.start(consumers, cluster, "TopicNoLock")
        wait_until(lambda: tracker.consumed(b"m") == 20, timeout=TIMEOUT_S,
                   message="consumed without the lock")
    took_s = time.monotonic() - started
    print(f"unreachable for locks: consumed after {took_s:.2f} s")
    assert LOCK_UNREACHABLE_WAIT_S <= took_s < LOCK_UNREACHABLE_WAIT_S + 5
    assert "consuming it without the lock" in caplog.text


def start_child(cluster: Cluster, topic: str, *args: str) -> subprocess.Popen[str]:
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.mqclient.consumer_child", cluster.namesrv_addr, topic,
         "CG", *args], cwd=REPO_ROOT, env=child_env(), stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL, text=True)
    assert child.stdout is not None and child.stdout.readline().startswith("started")
    return child


def test_sigterm_with_a_full_buffer_commits_before_the_queues_move(
        cluster: Cluster, consumers: list[PushConsumer], tmp_path: Path) -> None:
    """Item 2: a consumer process stopped with SIGTERM while its buffer is full stops
    within its bound, processes nothing after its final commit, and keeps its queues (its
    group membership) until that commit: nothing it finished is delivered again."""
    cluster.start_broker("broker-a")
    create_topic(cluster, "TopicTerm", 4).shutdown()
    tracker = Tracker(0.002)
    other = tracker.start(consumers, cluster, "TopicTerm")
    log = tmp_path / "child.log"
    child = start_child(cluster, "TopicTerm", "--sleep", "0.02", "--log", str(log), "--first")
    try:
        wait_until(lambda: len(other.assigned_queues("TopicTerm")) == 2, timeout=TIMEOUT_S,
                   message="the queues shared with the child")
        n = 3000
        send_backlog(cluster, "TopicTerm", n)
        wait_until(lambda: len(log.read_text().splitlines()) > 100, timeout=TIMEOUT_S,
                   message="the child consuming")
        child.send_signal(signal.SIGTERM)
        assert child.stdout is not None
        line = child.stdout.readline()
        assert child.wait(30) == 0
    finally:
        stop_process(child, 10)
    stopped_s = float(line.split()[1])

    def finished_by_child() -> set[bytes]:
        return {b.encode() for b in log.read_text().split() if b.startswith("m")}

    wait_until(lambda: len(finished_by_child() | set(tracker.bodies)) >= n + 1,
               timeout=TIMEOUT_S, message="the backlog consumed")
    with tracker.lock:
        again = finished_by_child() & {b for b in tracker.bodies if b.startswith(b"m")}
    print(f"SIGTERM: shutdown took {stopped_s:.2f} s; {len(finished_by_child())} finished "
          f"by the stopped consumer, {len(again)} of them delivered again")
    assert stopped_s < 10
    assert not again, sorted(again)[:10]


def cached(c: PushConsumer) -> dict[int, tuple[int, int]]:
    """queue id -> (messages, body bytes) buffered by `c`."""
    async def on_loop() -> dict[int, tuple[int, int]]:
        assert c.rebalancer is not None
        return {mq.queue_id: (len(pq), pq.msg_size)
                for mq, pq in c.rebalancer.process_queues.items() if not mq.topic.startswith("%")}
    return c.loop.run(on_loop())


def test_buffered_bytes_stay_under_the_size_thresholds(
        cluster: Cluster, consumers: list[PushConsumer]) -> None:
    """Item 4: pulling pauses at pull_threshold_size_for_queue MiB buffered per queue (and
    at a queue's share of pull_threshold_size_for_topic), not only at 1,000 messages."""
    cluster.start_broker("broker-a")
    create_topic(cluster, "TopicBig", 2).shutdown()
    release = threading.Event()

    def blocked(msgs: list[MessageExt]) -> ConsumeStatus:
        release.wait(TIMEOUT_S)
        return ConsumeStatus.CONSUME_SUCCESS

    try:
        per_queue = start_consumer(consumers, cluster, blocked, "TopicBig", group="G1",
                                   consume_from_where=FIRST, pull_threshold_size_for_queue=2)
        per_topic = start_consumer(consumers, cluster, blocked, "TopicBig", group="G2",
                                   consume_from_where=FIRST, pull_threshold_size_for_topic=2)
        body = b"x" * (256 * 1024)
        with Producer("PG", cluster.namesrv_addr) as producer:
            for i in range(40):  # 10 MiB, 5 MiB a queue
                producer.send(Message("TopicBig", b"%d:" % i + body))
        mib = 1024 * 1024
        for c, cap in ((per_queue, 2 * mib), (per_topic, mib)):
            wait_until(lambda c=c, cap=cap: all(size >= cap for _, size in cached(c).values())
                       and len(cached(c)) == 2, timeout=TIMEOUT_S,
                       message=f"buffers full: {cached(c)}")
        time.sleep(0.5)  # more pulls would come now
        for c, cap in ((per_queue, 2 * mib), (per_topic, mib)):
            # One pull past the threshold at most (a pull returns up to 256 KiB).
            assert all(size <= cap + 2 * len(body) for _, size in cached(c).values()), (
                cached(c))
    finally:
        release.set()


class ToTheNewest:
    """Every queue to the consumer created last (client ids end in a per-process count)."""

    name = "TO_THE_NEWEST"

    def allocate(self, group: str, current_cid: str, mq_all: Sequence[MessageQueue],
                 cid_all: Sequence[str]) -> list[MessageQueue]:
        newest = max(cid_all, key=lambda cid: int(cid.rsplit("#", 1)[1]))
        return list(mq_all) if current_cid == newest else []


def test_an_orderly_queue_moves_only_once_its_running_call_ended(
        cluster: Cluster, consumers: list[PushConsumer]) -> None:
    """Item 5: the queue is reassigned while the old owner is inside a 5 s listener call
    (longer than the former 3 s UNLOCK_WAIT_S): the old owner keeps its lock until the
    call ends, so the new owner never consumes the queue in parallel, and each message of
    the key is finished once, in order."""
    cluster.start_broker("broker-a")
    producer = create_topic(cluster, "TopicMove", 1)
    lock = threading.Lock()
    seen: list[tuple[str, int]] = []
    active: list[str] = []
    overlaps: list[list[str]] = []
    inside_slow = threading.Event()

    def listener(name: str):  # type: ignore[no-untyped-def]
        def consume(msgs: list[MessageExt]) -> ConsumeStatus:
            with lock:
                active.append(name)
                if len(active) > 1:
                    overlaps.append(list(active))
            try:
                for m in msgs:
                    if m.body == b"k:0" and not inside_slow.is_set():
                        inside_slow.set()
                        time.sleep(5)
                    if m.body.startswith(b"k:"):
                        with lock:
                            seen.append((name, int(m.body[2:])))
            finally:
                with lock:
                    active.remove(name)
            return ConsumeStatus.CONSUME_SUCCESS
        return consume

    kw: dict[str, Any] = dict(orderly=True, consume_from_where=FIRST, rebalance_interval_s=1,
                              allocate_strategy=ToTheNewest())
    start_consumer(consumers, cluster, listener("old"), "TopicMove", **kw)
    try:
        for i in range(10):
            producer.send_orderly(Message("TopicMove", b"k:%d" % i), "k")
    finally:
        producer.shutdown()
    assert inside_slow.wait(TIMEOUT_S)
    start_consumer(consumers, cluster, listener("new"), "TopicMove", **kw)
    wait_until(lambda: len(seen) >= 10, timeout=TIMEOUT_S, message=f"got {seen}")
    time.sleep(0.5)
    with lock:
        assert not overlaps, overlaps
        assert [i for _, i in seen] == list(range(10)), seen
        assert seen[0] == ("old", 0) and {n for n, _ in seen[1:]} == {"new"}, seen


def test_a_second_broadcasting_instance_on_one_offsets_file_is_refused(
        cluster: Cluster, consumers: list[PushConsumer], tmp_path: Path) -> None:
    """Item 7: two live broadcasting instances of a group must not share an offsets file;
    the second is refused with a message naming offsets_dir, and may start once the
    first is shut down."""
    cluster.start_broker("broker-a")
    create_topic(cluster, "TopicBcLock", 1).shutdown()
    kw: dict[str, Any] = dict(group="BG", message_model=MessageModel.BROADCASTING,
                              offsets_dir=tmp_path / "offsets")
    first = start_consumer(consumers, cluster, Collector().listener("a"), "TopicBcLock", **kw)
    with pytest.raises(MQClientError, match="offsets_dir"):
        start_consumer(consumers, cluster, Collector().listener("b"), "TopicBcLock", **kw)
    consumers.pop()  # never started
    consumers.remove(first)
    first.shutdown()
    start_consumer(consumers, cluster, Collector().listener("c"), "TopicBcLock", **kw)


def test_a_forced_offset_reset_moves_an_online_consumer(
        cluster: Cluster, consumers: list[PushConsumer],
        capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 14's `mqadmin resetOffsetByTime -f` against an online consumer: it drops what
    it buffered (and the results of calls in progress) and goes on from the new offsets,
    both backwards (everything consumed again) and forwards (the backlog skipped)."""
    cluster.start_broker("broker-a")
    create_topic(cluster, "TopicReset", 2).shutdown()
    lock = threading.Lock()
    seen: Counter[bytes] = Counter()
    hold = threading.Event()
    hold.set()

    def listener(msgs: list[MessageExt]) -> ConsumeStatus:
        if msgs[0].body.startswith(b"b"):
            hold.wait(TIMEOUT_S)
        with lock:
            seen.update(m.body for m in msgs)
        return ConsumeStatus.CONSUME_SUCCESS

    def count(prefix: bytes, times: int = 1) -> int:
        with lock:
            return sum(1 for b, n in seen.items() if b.startswith(prefix) and n >= times)

    def reset(when: str) -> None:
        code = mqadmin.main(["resetOffsetByTime", "-n", cluster.namesrv_addr, "-g", "CG",
                             "-t", "TopicReset", "-s", when, "-f"])
        assert code == 0, capsys.readouterr().err

    start_consumer(consumers, cluster, listener, "TopicReset", consume_from_where=FIRST,
                   persist_offset_interval_s=0.3)
    with Producer("PG", cluster.namesrv_addr) as producer:
        for i in range(20):
            producer.send(Message("TopicReset", b"a%d" % i))
        wait_until(lambda: count(b"a") == 20, timeout=TIMEOUT_S, message="consumed once")
        time.sleep(1.0)  # committed
        reset("earliest")
        wait_until(lambda: count(b"a", 2) == 20, timeout=TIMEOUT_S,
                   message=f"consumed again after the reset ({count(b'a', 2)} of 20)")

        hold.clear()  # the listener blocks on b*: the consumer's buffer fills
        send_backlog_with(producer, "TopicReset", b"b", 300)
        time.sleep(1.0)
        reset("now")
        time.sleep(0.5)
        hold.set()
        producer.send(Message("TopicReset", b"after"))
    wait_until(lambda: count(b"after") == 1, timeout=TIMEOUT_S, message="the next message")
    time.sleep(0.5)
    # Only the calls in progress at the reset (one a consume thread) ran on b*.
    assert count(b"b") <= 8, count(b"b")


def send_backlog_with(producer: Producer, topic: str, prefix: bytes, n: int) -> None:
    for start in range(0, n, 50):
        producer.send_batch([Message(topic, prefix + b"%d" % i)
                             for i in range(start, min(n, start + 50))])
