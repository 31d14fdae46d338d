"""Pure parts of the client: allocation strategies, latency fault tolerance (fake clock),
queue selection, message checks, and the async-send accumulator on a real client loop."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from types import SimpleNamespace

import pytest

from mqclient.accumulator import BatchAccumulator
from mqclient.allocate import AllocateAveragely, AllocateAveragelyByCircle
from mqclient.fault import LatencyFaultTolerance, QueueSelector
from mqclient.loop import ClientLoop
from mqclient.message import Message, MessageQueue, MQClientError, SendResult, SendStatus
from mqclient.offset_store import RemoteBrokerOffsetStore
from mqclient.process_queue import ProcessQueue
from mqclient.producer import STICKY_QUEUE_MS, Producer, select_by_hash
from mqclient.puller import PullService
from mqclient.route import BrokerGroup, TopicRoute
from mqproto import common_pb2, messaging_pb2
from remoting.framing import decode_batch, encode_batch_message
from tests.support.clock import FakeClock

QUEUES = [MessageQueue("T", "broker-a", i) for i in range(16)]
CIDS = ["c0", "c1", "c2"]


def ids(mqs: list[MessageQueue]) -> list[int]:
    return [mq.queue_id for mq in mqs]


def test_allocate_averagely_gives_consecutive_blocks() -> None:
    strategy = AllocateAveragely()
    # The seed's example: 16 queues, 3 consumers.
    assert ids(strategy.allocate("G", "c0", QUEUES, CIDS)) == [0, 1, 2, 3, 4, 5]
    assert ids(strategy.allocate("G", "c1", QUEUES, CIDS)) == [6, 7, 8, 9, 10]
    assert ids(strategy.allocate("G", "c2", QUEUES, CIDS)) == [11, 12, 13, 14, 15]
    # More consumers than queues: the last ones get nothing.
    few = QUEUES[:2]
    assert [ids(strategy.allocate("G", c, few, CIDS)) for c in CIDS] == [[0], [1], []]
    # A consumer not in the list gets nothing.
    assert strategy.allocate("G", "stranger", QUEUES, CIDS) == []


def test_allocate_by_circle_deals_round_the_table() -> None:
    strategy = AllocateAveragelyByCircle()
    assert ids(strategy.allocate("G", "c0", QUEUES, CIDS)) == [0, 3, 6, 9, 12, 15]
    assert ids(strategy.allocate("G", "c1", QUEUES, CIDS)) == [1, 4, 7, 10, 13]
    assert ids(strategy.allocate("G", "c2", QUEUES, CIDS)) == [2, 5, 8, 11, 14]


@pytest.mark.parametrize("strategy", [AllocateAveragely(), AllocateAveragelyByCircle()])
@pytest.mark.parametrize("n_queues,n_consumers", [(8, 3), (8, 8), (3, 5), (16, 1)])
def test_allocation_is_a_partition(strategy: AllocateAveragely, n_queues: int,
                                   n_consumers: int) -> None:
    queues = QUEUES[:n_queues]
    cids = [f"c{i}" for i in range(n_consumers)]
    parts = [strategy.allocate("G", c, queues, cids) for c in cids]
    flat = [mq for part in parts for mq in part]
    assert sorted(flat) == sorted(queues)
    assert max(map(len, parts)) - min(map(len, parts)) <= 1


def test_fault_tolerance_backs_off_failed_and_slow_brokers() -> None:
    clock = FakeClock()
    fault = LatencyFaultTolerance(clock)
    fault.update("a", 10, failed=False)
    assert fault.is_available("a")
    fault.update("a", 600, failed=False)  # >= 550 ms: 30 s
    assert not fault.is_available("a")
    clock.now_ms += 29_999
    assert not fault.is_available("a")
    clock.now_ms += 1
    assert fault.is_available("a")
    fault.update("b", 5, failed=True)  # a failure: isolated 30 s
    assert not fault.is_available("b")
    clock.now_ms += 30_000
    assert fault.is_available("b")
    fault.update("b", 3_500, failed=False)  # >= 3000 ms: 180 s
    clock.now_ms += 179_000
    assert not fault.is_available("b")


def test_selector_round_robins_and_skips_unavailable_and_last_broker() -> None:
    clock = FakeClock()
    fault = LatencyFaultTolerance(clock)
    selector = QueueSelector(fault)
    queues = [MessageQueue("T", b, i) for b in ("a", "b") for i in range(2)]
    picked = [selector.select(queues) for _ in range(8)]
    first = queues.index(picked[0])  # a random start
    assert picked == (queues[first:] + queues[:first]) * 2
    fault.update("a", 0, failed=True)
    assert {selector.select(queues).broker_name for _ in range(6)} == {"b"}
    # A retry avoids the broker that just failed even when it is the only available one.
    clock.now_ms += 60_000
    assert {selector.select(queues, last_broker="b").broker_name for _ in range(6)} == {"a"}
    # Everything in back-off: the broker whose back-off ends first.
    fault.update("a", 0, failed=True)
    clock.now_ms += 1
    fault.update("b", 0, failed=True)
    assert selector.select(queues).broker_name == "a"


def test_selector_spreads_a_broker_in_back_off_over_every_other_queue() -> None:
    """The turns of broker-a's queues go round broker-b's, not all to its first queue."""
    fault = LatencyFaultTolerance(FakeClock())
    selector = QueueSelector(fault)
    queues = [MessageQueue("T", b, i) for b in ("a", "b") for i in range(4)]
    fault.update("a", 0, failed=True)
    picked = Counter(selector.select(queues) for _ in range(800))
    assert picked == {q: 200 for q in queues if q.broker_name == "b"}
    # A retry after broker-b failed goes round broker-c's queues alike.
    more = queues + [MessageQueue("T", "c", i) for i in range(4)]
    retried = Counter(selector.select(more, last_broker="b") for _ in range(800))
    assert retried == {q: 200 for q in more if q.broker_name == "c"}


def test_selector_turns_per_topic() -> None:
    """Two topics sent in turn each use all their queues (one shared turn gave each topic
    every other queue)."""
    selector = QueueSelector(LatencyFaultTolerance(FakeClock()))
    topics = {t: [MessageQueue(t, "a", i) for i in range(4)] for t in ("T1", "T2")}
    picked: Counter[MessageQueue] = Counter()
    for _ in range(40):
        for queues in topics.values():
            picked[selector.select(queues)] += 1
    assert picked == {q: 10 for queues in topics.values() for q in queues}


def test_select_by_hash_is_stable_per_key() -> None:
    queues = QUEUES[:8]
    msg = Message("T", b"x")
    assert select_by_hash(queues, msg, "order-7") == select_by_hash(queues, msg, "order-7")
    assert len({select_by_hash(queues, msg, f"k{i}") for i in range(100)}) == 8


@pytest.mark.parametrize("msg,reason", [
    (Message("", b"x"), "no topic"),
    (Message("T", b""), "empty"),
    (Message("T", "text"), "must be bytes"),  # type: ignore[arg-type]
    (Message("T", b"x" * 11), "over the maximum"),
    (Message("T", b"x", properties={"KEYS": "k"}), "reserved"),
])
def test_bad_messages_are_refused_before_sending(msg: Message, reason: str) -> None:
    with pytest.raises(MQClientError, match=reason) as e:
        msg.check(max_size=10)
    assert e.value.code == "ILLEGAL_ARGUMENT"


def test_process_queue_commit_offset_waits_for_the_oldest_message() -> None:
    pq = ProcessQueue(QUEUES[0], 10)
    pq.max_offset = 9
    assert pq.commit_offset() == 10
    msgs = [_ext(o) for o in range(10, 15)]
    pq.put(msgs)
    assert pq.remove(msgs[1:3]) == 10  # 10 is still in flight
    assert pq.remove(msgs[:1]) == 13
    assert pq.remove(msgs[3:]) == 15
    assert pq.first(3) == []


def _ext(offset: int):  # type: ignore[no-untyped-def]
    from mqclient.message import MessageExt
    return MessageExt(topic="T", body=b"", tags="", keys=[], properties={}, msg_id="",
                      offset_msg_id="", broker_name="broker-a", queue_id=0,
                      queue_offset=offset, commit_log_offset=0, born_timestamp=0,
                      store_timestamp=0, born_host="", store_host="", reconsume_times=0)


def test_accumulator_batches_by_count_and_linger_and_limits_inflight() -> None:
    loop = ClientLoop("test-accumulator")
    calls: list[tuple[str, int]] = []
    inflight = 0
    max_inflight_seen = 0
    release = threading.Event()

    async def sender(topic: str, ids: list[str], encoded: bytes, deadline: float, timeout_s: float,
                     flags: list[int]) -> list[SendResult]:
        nonlocal inflight, max_inflight_seen
        assert [body for _, body, _ in decode_batch(encoded)] == [i.encode() for i in ids]
        calls.append((topic, len(ids)))
        inflight += 1
        max_inflight_seen = max(max_inflight_seen, inflight)
        while not release.is_set():
            await asyncio.sleep(0.005)
        inflight -= 1
        mq = MessageQueue(topic, "broker-a", 0)
        return [SendResult(SendStatus.SEND_OK, message_id, "", mq, i)
                for i, message_id in enumerate(ids)]

    acc = BatchAccumulator(loop, sender, linger_s=0.05, max_count=10, max_bytes=1 << 20,
                           max_inflight=2)
    from mqclient.message import SendFuture
    futures = []
    for i in range(35):
        f = SendFuture()
        acc.append("T", f"m{i}", encode_batch_message(0, b"m%d" % i, b""), f, 5.0)
        futures.append(f)
    time.sleep(0.2)
    assert len(calls) == 2 and max_inflight_seen == 2  # two full batches, the rest waits
    release.set()
    results = [f.result(timeout=5) for f in futures]
    assert [r.msg_id for r in results] == [f"m{i}" for i in range(35)]
    assert [n for _, n in calls] == [10, 10, 10, 5]  # the last 5 went after the linger
    loop.run(acc.close())
    with pytest.raises(MQClientError, match="shut down"):
        acc.append("T", "late", encode_batch_message(0, b"late", b""), SendFuture(), 1.0)
    loop.loop.call_soon_threadsafe(loop.loop.stop)
    loop.thread.join(5)


def test_send_future_behaves_as_a_concurrent_future() -> None:
    import concurrent.futures as cf

    from mqclient.message import SendFuture

    done_early = SendFuture()
    done_early.set_result(5)
    assert done_early.result() == 5 and done_early.done()
    with pytest.raises(cf.InvalidStateError):
        done_early.set_result(6)
    waited = SendFuture()
    threading.Timer(0.05, waited.set_result, (7,)).start()
    assert waited.result(timeout=5) == 7  # completed while a thread waits on it
    with pytest.raises(TimeoutError):
        SendFuture().result(timeout=0.01)
    many = [SendFuture() for _ in range(10)]
    threading.Timer(0.05, lambda: [f.set_result(i) for i, f in enumerate(many)]).start()
    assert sorted(f.result() for f in cf.as_completed(many, timeout=5)) == list(range(10))
    three = [SendFuture() for _ in range(3)]
    threading.Timer(0.05, three[1].set_exception, (ValueError("x"),)).start()
    done, _ = cf.wait(three, timeout=5, return_when=cf.FIRST_EXCEPTION)
    assert done == {three[1]}
    seen: list[int] = []
    with_callback = SendFuture()
    with_callback.add_done_callback(lambda f: seen.append(f.result()))
    with_callback.set_result(9)
    assert seen == [9]
    cancelled = SendFuture()
    assert cancelled.cancel() and cancelled.cancelled()
    with pytest.raises(cf.InvalidStateError):
        cancelled.set_result(1)

    async def awaited() -> int:
        f = SendFuture()
        asyncio.get_running_loop().call_later(0.01, f.set_result, 3)
        return int(await f)

    assert asyncio.run(awaited()) == 3
    # A pending future holds no container the garbage collector walks (thousands wait at
    # once; their lists made a fifth of the client's CPU in collections).
    import gc
    pending = SendFuture()
    assert [o for o in gc.get_referents(pending) if gc.is_tracked(o) and o is not SendFuture] == []


def test_pull_addresses_try_the_one_that_failed_longest_ago_when_all_are_down() -> None:
    """Master and slave both failed: the next pull goes to the one that failed first (the
    slave may be back), not always to the master that failed last."""
    master, slave = "10.0.0.1:1", "10.0.0.2:1"
    group = BrokerGroup("DefaultCluster", "broker-a", {0: master, 1: slave})
    clock = FakeClock()
    instance = SimpleNamespace(broker_group=lambda mq: group, clock=clock.monotonic)
    pulls = PullService(instance, "G", None, batch_size=32, threshold=1000,  # type: ignore[arg-type]
                        commit_on_pull=True, may_pull=lambda pq: True,
                        on_messages=lambda pq, msgs: None)
    mq = MessageQueue("T", "broker-a", 0)
    assert pulls._addresses(mq) == [(master, True), (slave, False)]
    pulls._down_until[slave] = clock.monotonic() + 30   # the slave failed first
    assert pulls._addresses(mq) == [(master, True), (slave, False)]
    clock.advance(1)
    pulls._down_until[master] = clock.monotonic() + 30  # then the master
    assert pulls._addresses(mq) == [(slave, False), (master, True)]
    clock.advance(1)
    pulls._down_until[slave] = clock.monotonic() + 30   # the slave again
    assert pulls._addresses(mq) == [(master, True), (slave, False)]


def test_offset_not_found_on_the_master_is_asked_of_its_slave() -> None:
    """A master restarted after a kill -9 may lack the group's offset its slave holds:
    the slave's answer counts (else the queue would start again from its first offset)."""
    master, slave = "10.0.0.1:1", "10.0.0.2:1"
    answers = {master: common_pb2.QUERY_NOT_FOUND, slave: common_pb2.SUCCESS}
    asked: list[str] = []

    def stub(addr: str) -> SimpleNamespace:
        async def query(request: messaging_pb2.QueryConsumerOffsetRequest, timeout: float
                        ) -> messaging_pb2.QueryConsumerOffsetResponse:
            asked.append(addr)
            return messaging_pb2.QueryConsumerOffsetResponse(
                status=common_pb2.Status(code=answers[addr]), offset=42)
        return SimpleNamespace(QueryConsumerOffset=query)

    group = BrokerGroup("DefaultCluster", "broker-a", {0: master, 1: slave})
    instance = SimpleNamespace(broker_group=lambda mq: group,
                               channels=SimpleNamespace(messaging=stub))
    store = RemoteBrokerOffsetStore(instance, "G")  # type: ignore[arg-type]
    mq = MessageQueue("T", "broker-a", 0)
    assert asyncio.run(store.read_from_store(mq)) == 42
    assert asked == [master, slave]
    answers[slave] = common_pb2.QUERY_NOT_FOUND
    assert asyncio.run(store.read_from_store(mq)) == -1
    # A slave that cannot tell (it does not know a topic created a moment ago) does not
    # turn the master's "none" into a failure.
    answers[slave] = common_pb2.TOPIC_NOT_EXIST
    assert asyncio.run(store.read_from_store(mq)) == -1
def test_accumulator_sends_the_batches_of_many_topics_together() -> None:
    """Issue 18: async sends spread over topics leave in one multi-batch call per loop turn
    (the producer sends those of one broker in one SEND_BATCHES request), not a call per
    topic; a batch the multi-sender failed fails only its own futures."""
    from mqclient.accumulator import Batch
    from mqclient.message import SendFuture

    loop = ClientLoop("test-accumulator-multi")
    single_calls: list[str] = []
    multi_calls: list[list[str]] = []

    async def sender(topic: str, ids: list[str], encoded: bytes, deadline: float, timeout_s: float,
                     flags: list[int]) -> list[SendResult]:
        single_calls.append(topic)
        return [SendResult(SendStatus.SEND_OK, m, "", MessageQueue(topic, "b", 0), i)
                for i, m in enumerate(ids)]

    async def multi_sender(batches: list[Batch]) -> list[list[SendResult] | BaseException]:
        multi_calls.append([b.topic for b in batches])
        out: list[list[SendResult] | BaseException] = []
        for b in batches:
            if b.topic == "T-bad":
                out.append(MQClientError("NO_PERMISSION", "refused"))
            else:
                out.append([SendResult(SendStatus.SEND_OK, m, "", MessageQueue(b.topic, "b", 0),
                                       i) for i, m in enumerate(b.ids)])
        return out

    acc = BatchAccumulator(loop, sender, linger_s=0.05, max_count=10, max_bytes=1 << 20,
                           max_inflight=2, multi_sender=multi_sender)
    topics = [f"T{i}" for i in range(200)] + ["T-bad"]
    futures = {topic: SendFuture() for topic in topics}

    async def append_all() -> None:  # in one loop turn: the lingers expire together
        for topic in topics:
            acc.append(topic, f"id-{topic}", encode_batch_message(0, topic.encode(), b""),
                       futures[topic], 5.0)

    loop.run(append_all())
    for topic in topics[:-1]:
        assert futures[topic].result(timeout=5).msg_id == f"id-{topic}"
    with pytest.raises(MQClientError, match="NO_PERMISSION"):
        futures["T-bad"].result(timeout=5)
    assert single_calls == []
    assert sum(len(c) for c in multi_calls) == len(topics)
    # Lingers that expire in one loop turn leave together: one call, not one per topic.
    assert len(multi_calls) <= 2, [len(c) for c in multi_calls]
    loop.run(acc.close())
    loop.loop.call_soon_threadsafe(loop.loop.stop)
    loop.thread.join(5)


def test_accumulator_batches_grow_while_the_rounds_in_flight_are_the_most_allowed() -> None:
    """Issue 18: with max_inflight_rounds sends in flight, lingers that expire meanwhile
    do not send a batch each: a topic's messages keep filling its batch, which leaves (with
    every other open one) when a send ends. Without the limit each linger sent its own."""
    from mqclient.accumulator import Batch
    from mqclient.message import SendFuture

    loop = ClientLoop("test-accumulator-rounds")
    release = threading.Event()
    rounds: list[list[tuple[str, int]]] = []

    async def sender(topic: str, ids: list[str], encoded: bytes, deadline: float, timeout_s: float,
                     flags: list[int]) -> list[SendResult]:
        raise AssertionError("a multi-sender serves every send")

    async def multi_sender(batches: list[Batch]) -> list[list[SendResult] | BaseException]:
        rounds.append([(b.topic, len(b.ids)) for b in batches])
        if len(rounds) == 1:
            await asyncio.get_running_loop().run_in_executor(None, release.wait, 5.0)
        return [[SendResult(SendStatus.SEND_OK, m, "", MessageQueue(b.topic, "b", 0), i)
                 for i, m in enumerate(b.ids)] for b in batches]

    acc = BatchAccumulator(loop, sender, linger_s=0.01, max_count=100, max_bytes=1 << 20,
                           max_inflight=4, multi_sender=multi_sender, max_inflight_rounds=1)
    futures = []

    def append(topic: str, i: int) -> None:
        f = SendFuture()
        acc.append(topic, f"{topic}-{i}", encode_batch_message(0, b"x", b""), f, 5.0)
        futures.append(f)

    append("A", 0)
    append("B", 0)
    deadline = time.monotonic() + 5
    while len(rounds) < 1 and time.monotonic() < deadline:
        time.sleep(0.005)
    for i in range(1, 6):  # each a few lingers apart, while the first round is in flight
        append("A", i)
        append("C", i)
        time.sleep(0.03)
    release.set()
    assert all(f.result(timeout=5).status is SendStatus.SEND_OK for f in futures)
    assert sorted(rounds[0]) == [("A", 1), ("B", 1)]
    assert sorted(rounds[1]) == [("A", 5), ("C", 5)], rounds  # one batch each, not five
    assert len(rounds) == 2
    loop.run(acc.close())
    loop.loop.call_soon_threadsafe(loop.loop.stop)
    loop.thread.join(5)


def test_an_async_send_times_out_from_its_own_append_not_its_batch_opening() -> None:
    """A batch that waited for the rounds in flight holds an early message (short
    timeout, passed while it waited) and a late one: the early one fails TIMEOUT without
    being sent; the late one's batch is sent with the late one's whole timeout ahead
    (it was counted from the batch's opening, and late-comers timed out at once)."""
    from mqclient.accumulator import Batch
    from mqclient.message import SendFuture

    loop = ClientLoop("test-accumulator-deadlines")
    release = threading.Event()
    rounds: list[tuple[str, list[str], float]] = []  # a batch each (one per round here)

    clock = FakeClock()  # the messages' deadlines; the linger is the loop's own time

    async def sender(topic: str, ids: list[str], encoded: bytes, deadline: float,
                     timeout_s: float, flags: list[int]) -> list[SendResult]:
        rounds.append((topic, list(ids), deadline - clock.monotonic()))
        if len(rounds) == 1:
            await asyncio.get_running_loop().run_in_executor(None, release.wait, 5.0)
        return [SendResult(SendStatus.SEND_OK, m, "", MessageQueue(topic, "b", 0), i)
                for i, m in enumerate(ids)]

    async def multi_sender(batches: list[Batch]) -> list[list[SendResult] | BaseException]:
        raise AssertionError("one batch a round here")

    acc = BatchAccumulator(loop, sender, linger_s=0.01, max_count=100, max_bytes=1 << 20,
                           max_inflight=4, multi_sender=multi_sender, max_inflight_rounds=1,
                           clock=clock.monotonic)

    def append(topic: str, message_id: str, timeout_s: float) -> SendFuture:
        f = SendFuture()
        acc.append(topic, message_id, encode_batch_message(0, b"x", b""), f, timeout_s)
        return f

    first = append("A", "first", 5.0)
    deadline = time.monotonic() + 5
    while not rounds and time.monotonic() < deadline:
        time.sleep(0.005)
    early = append("B", "early", 0.2)
    clock.advance(0.4)  # the early one's timeout passes while its batch waits
    late = append("B", "late", 3.0)
    release.set()
    assert first.result(timeout=5).status is SendStatus.SEND_OK
    assert late.result(timeout=5).status is SendStatus.SEND_OK
    error = early.exception(timeout=5)
    assert isinstance(error, MQClientError) and error.code == "TIMEOUT", error
    assert [(topic, ids) for topic, ids, _ in rounds] == [("A", ["first"]), ("B", ["late"])]
    assert 2.5 < rounds[1][2] <= 3.0  # the late one's whole timeout, less the wait
    loop.run(acc.close())
    loop.loop.call_soon_threadsafe(loop.loop.stop)
    loop.thread.join(5)


def test_async_batches_stick_to_a_queue_until_batch_max_bytes_went_there() -> None:
    """Issue 18 (Kafka's uniform sticky partitioner): a topic's async batches go to one queue
    until batch_max_bytes went there (or STICKY_QUEUE_MS passed), then to the selector's
    next; over time every queue gets its share. A broker in back-off, or a new route, ends
    the stick at once."""
    clock = FakeClock()
    producer = Producer("StickyGroup", "127.0.0.1:9", batch_max_bytes=1000, clock_ms=clock,
                        client_ip="127.0.0.1")
    queues = tuple(MessageQueue("T", b, i) for b in ("a", "b") for i in range(2))
    route = TopicRoute("T", {}, queues, queues)
    picks = [producer._sticky_queue("T", route, 300) for _ in range(7)]
    first = queues.index(picks[0])  # the selector starts a topic at a random queue

    def after(n: int) -> MessageQueue:
        return queues[(first + n) % len(queues)]

    assert picks == [after(0)] * 4 + [after(1)] * 3  # 4 x 300 bytes reach 1,000
    other = TopicRoute("U", {}, tuple(MessageQueue("U", "a", i) for i in range(4)), ())
    assert producer._sticky_queue("U", other, 10) in other.publish_queues  # its own
    assert producer._sticky_queue("T", route, 300) == after(1)  # 900 bytes there so far
    assert producer._sticky_queue("T", route, 300) == after(2)  # the selector's next for T
    shares: dict[MessageQueue, int] = {}
    for _ in range(400):
        mq = producer._sticky_queue("T", route, 100)
        shares[mq] = shares.get(mq, 0) + 100
    assert set(shares) == set(queues) and max(shares.values()) - min(shares.values()) <= 1000
    producer.fault.update("a", 0, failed=True)  # isolated: T leaves its queue on a at once
    assert {producer._sticky_queue("T", route, 1).broker_name for _ in range(5)} == {"b"}
    refreshed = TopicRoute("T", {}, queues[2:], queues[2:])
    assert producer._sticky_queue("T", refreshed, 1) in queues[2:]
    # A slow producer: the queue changes after STICKY_QUEUE_MS even with few bytes sent.
    slow = TopicRoute("S", {}, tuple(MessageQueue("S", "b", i) for i in range(4)), ())
    first = producer._sticky_queue("S", slow, 10)
    clock.now_ms += STICKY_QUEUE_MS - 1
    assert producer._sticky_queue("S", slow, 10) == first
    clock.now_ms += 1
    assert producer._sticky_queue("S", slow, 10) != first


def test_an_orderly_queue_is_consumed_only_under_a_lock_younger_than_lock_trusted_s() -> None:
    """The consumer's clock decides how long a broker lock is trusted (no sleeping)."""
    from mqclient import PushConsumer
    from mqclient.consumer import LOCK_TRUSTED_S

    clock = FakeClock()
    consumer = PushConsumer("G", "127.0.0.1:1", clock=clock.monotonic)
    consumer.register_listener_orderly(lambda msgs: None)  # type: ignore[arg-type,return-value]
    consumer.rebalancer = SimpleNamespace(locks_queues=True)  # type: ignore[assignment]
    pq = ProcessQueue(QUEUES[0], 0)
    assert not consumer._may_consume(pq)  # never locked
    pq.locked, pq.last_lock_time = True, clock.monotonic()
    clock.advance(LOCK_TRUSTED_S - 0.001)
    assert consumer._may_consume(pq)
    clock.advance(0.001)
    assert not consumer._may_consume(pq)  # renewals failed for LOCK_TRUSTED_S: it stops


def test_a_queue_whose_lock_comes_back_after_another_consumer_committed_restarts_there() -> None:
    """Around a master's restart (its locks gone) two consumers may both own a queue for a
    moment: the one that lost its lock and gets it back must not consume its stale buffer
    again nor commit below what the other committed (chaos scenario 5 saw 21 -> 18)."""
    from mqclient.offset_store import _MemoryOffsets
    from mqclient.rebalance import ConsumeFromWhere, MessageModel, Rebalancer

    class Offsets(_MemoryOffsets):
        committed = 21

        async def read_from_store(self, mq: MessageQueue) -> int:
            return self.committed

        async def persist(self, mqs: list[MessageQueue]) -> None:
            pass

    started: list[ProcessQueue] = []
    clock = FakeClock()
    offsets = Offsets()
    rebalancer = Rebalancer(
        SimpleNamespace(clock=clock.monotonic), "G", MessageModel.CLUSTERING,  # type: ignore[arg-type]
        AllocateAveragely(), offsets, ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET, 0,
        orderly=True, start_pull=started.append, stop_pull=lambda mq: None)
    mq = QUEUES[0]
    old = ProcessQueue(mq, 17)  # pulled from 17 before the restart, nothing consumed since
    old.locked = True
    rebalancer.process_queues[mq] = old
    offsets.update(mq, 17, False)
    grants: list[set[MessageQueue]] = [set(), {mq}]  # lost at the restart, then back

    async def lock(mqs: list[MessageQueue]) -> set[MessageQueue]:
        return grants.pop(0)

    rebalancer.lock = lock  # type: ignore[method-assign]

    async def scenario() -> tuple[list[ProcessQueue], bool, list[ProcessQueue]]:
        lost = await rebalancer.lock_all()
        locked_after_loss = rebalancer.process_queues[mq].locked
        back = await rebalancer.lock_all()
        await asyncio.gather(*rebalancer.release_tasks)
        return lost, locked_after_loss, back

    lost, locked_after_loss, back = asyncio.run(scenario())
    assert lost == [] and not locked_after_loss
    assert back == [] and old.dropped  # the stale buffer is not consumed
    assert offsets.read_memory(mq) == 21  # no commit of this consumer goes below 21
    new = rebalancer.process_queues[mq]
    assert new is not old and new.next_offset == 21 and new.locked and started == [new]

    # A lock lost and regained with nobody consuming meanwhile: the queue goes on as it was.
    offsets.committed = 18
    grants[:] = [set(), {mq}]
    lost, locked_after_loss, back = asyncio.run(scenario())
    assert back == [new] and not new.dropped and new.locked
