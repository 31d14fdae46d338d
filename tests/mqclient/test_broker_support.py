"""What the broker offers the client beyond send and pull: queue locks of orderly
consumers, unregistering a client, and membership watch streams (in-process broker, real
gRPC on loopback)."""

from __future__ import annotations

import threading
from collections.abc import Callable

from mqproto import common_pb2, messaging_pb2
from tests.support.brokers import BrokerThread, create_topic
from tests.support.waiting import wait_until

M = messaging_pb2
Start = Callable[..., BrokerThread]


def mq(queue_id: int) -> messaging_pb2.MessageQueue:
    return M.MessageQueue(topic="T", broker_name="broker-a", queue_id=queue_id)


def test_queue_locks_belong_to_one_client(start_broker: Start) -> None:
    b = start_broker()

    def lock(client: str, *ids: int) -> list[int]:
        r = b.messaging.LockBatchMQ(M.LockBatchMQRequest(
            consumer_group="G", client_id=client, mq_set=[mq(i) for i in ids]), timeout=10)
        assert r.status.code == common_pb2.SUCCESS
        return sorted(m.queue_id for m in r.lock_ok_mq_set)

    assert lock("a", 0, 1) == [0, 1]
    assert lock("b", 0, 1, 2) == [2]
    assert lock("a", 0, 1) == [0, 1]  # renewing is fine
    b.messaging.UnlockBatchMQ(M.UnlockBatchMQRequest(consumer_group="G", client_id="b",
                                                     mq_set=[mq(0)]), timeout=10)
    assert lock("b", 0) == []  # b cannot unlock a's queue
    b.messaging.UnlockBatchMQ(M.UnlockBatchMQRequest(consumer_group="G", client_id="a",
                                                     mq_set=[mq(0)]), timeout=10)
    assert lock("b", 0) == [0]
    assert lock("a", 0) == []  # now b holds it; another group has its own locks
    r = b.messaging.LockBatchMQ(M.LockBatchMQRequest(consumer_group="H", client_id="a",
                                                     mq_set=[mq(0)]), timeout=10)
    assert [m.queue_id for m in r.lock_ok_mq_set] == [0]


def test_watchers_hear_joins_and_leaves(start_broker: Start) -> None:
    b = start_broker()

    def heartbeat(client: str) -> None:
        r = b.messaging.Heartbeat(M.HeartbeatRequest(client_id=client, consumer_group="G"),
                                  timeout=10)
        assert r.status.code == common_pb2.SUCCESS

    def members() -> list[str]:
        r = b.messaging.GetConsumerListByGroup(M.GetConsumerListByGroupRequest(
            consumer_group="G"), timeout=10)
        return list(r.consumer_id_list)

    heartbeat("c1")
    events: list[list[str]] = []
    stream = b.messaging.WatchConsumerGroup(M.WatchConsumerGroupRequest(
        consumer_group="G", client_id="c1"))

    def read() -> None:
        try:
            for event in stream:
                events.append(list(event.consumer_id_list))
        except Exception:  # cancelled below
            pass

    reader = threading.Thread(target=read)
    reader.start()
    try:
        wait_until(lambda: events == [["c1"]], message="the current list first")
        heartbeat("c2")
        wait_until(lambda: events[-1:] == [["c1", "c2"]], message="c2 joined")
        heartbeat("c2")  # a heartbeat of a known member is no change
        r = b.messaging.UnregisterClient(M.UnregisterClientRequest(
            client_id="c2", consumer_group="G"), timeout=10)
        assert r.status.code == common_pb2.SUCCESS
        wait_until(lambda: events[-1:] == [["c1"]], message="c2 left")
        assert events == [["c1"], ["c1", "c2"], ["c1"]]
    finally:
        stream.cancel()
        reader.join(10)
    # The watcher's stream ended: the broker takes c1 as gone.
    wait_until(lambda: members() == [], message="c1 dropped with its stream")


def test_a_client_that_leaves_or_is_dropped_loses_its_queue_locks_at_once(
        start_broker: Start) -> None:
    """Unregistering, or the end of a client's last watch stream (a killed consumer),
    releases every queue lock it held, so the next owner need not wait for the 60 s
    expiry; the locks of other clients stay."""
    b = start_broker()

    def lock(client: str, *ids: int) -> list[int]:
        r = b.messaging.LockBatchMQ(M.LockBatchMQRequest(
            consumer_group="G", client_id=client, mq_set=[mq(i) for i in ids]), timeout=10)
        return sorted(m.queue_id for m in r.lock_ok_mq_set)

    for client in ("a", "b", "c"):
        b.messaging.Heartbeat(M.HeartbeatRequest(client_id=client, consumer_group="G"),
                              timeout=10)
    assert lock("a", 0, 1) == [0, 1] and lock("b", 2) == [2] and lock("c", 3) == [3]
    b.messaging.UnregisterClient(M.UnregisterClientRequest(client_id="a", consumer_group="G"),
                                 timeout=10)
    assert lock("x", 0, 1, 2) == [0, 1]  # b keeps queue 2
    stream = b.messaging.WatchConsumerGroup(M.WatchConsumerGroupRequest(
        consumer_group="G", client_id="b"))
    next(stream)  # the stream is open
    stream.cancel()  # as when b's process dies
    wait_until(lambda: lock("y", 2) == [2], message="b's lock released with its stream")
    assert lock("y", 3) == []  # c is still there


def test_a_silent_clients_locks_lapse_after_60_s_and_a_release_spares_the_next_holder(
        ) -> None:
    """RebalanceLockManager's 60 s: a client that neither renews nor leaves loses its
    locks then; releasing it later does not touch the locks others took meanwhile."""
    from broker.clients import QueueLocks

    now = [0]
    locks = QueueLocks(lambda: now[0])
    assert locks.try_lock_batch("G", "a", [("T", 0), ("T", 1)]) == [("T", 0), ("T", 1)]
    now[0] = 60_000
    assert locks.try_lock_batch("G", "b", [("T", 0)]) == []  # not lapsed yet
    now[0] = 60_001
    assert locks.try_lock_batch("G", "b", [("T", 0)]) == [("T", 0)]
    locks.release_client("G", "a")  # a leaves late: only its queue 1 is freed
    assert locks.try_lock_batch("G", "c", [("T", 0), ("T", 1)]) == [("T", 1)]
    locks.release_client("G", "b")
    assert locks.try_lock_batch("G", "c", [("T", 0)]) == [("T", 0)]


def test_only_the_lock_holder_commits_a_locked_queue(start_broker: Start) -> None:
    """A late commit of a queue's previous owner (a pull or a commit it sent before it gave
    the queue up, arriving after the next owner took the lock) must not move the group's
    offset back; commits naming no client (admin tools) are taken as before."""
    b = start_broker()
    create_topic(b, "T", 1)
    for _ in range(5):
        r = b.messaging.SendMessage(M.SendMessageRequest(
            producer_group="PG", message=M.Message(topic="T", body=b"x"), queue_id=0),
            timeout=10)
        assert r.status.code == common_pb2.SUCCESS

    def commit(offset: int, client: str) -> int:
        return b.messaging.UpdateConsumerOffset(M.UpdateConsumerOffsetRequest(
            consumer_group="G", topic="T", queue_id=0, commit_offset=offset,
            client_id=client), timeout=10).status.code

    def committed() -> int:
        return b.messaging.QueryConsumerOffset(M.QueryConsumerOffsetRequest(
            consumer_group="G", topic="T", queue_id=0), timeout=10).offset

    r = b.messaging.LockBatchMQ(M.LockBatchMQRequest(consumer_group="G", client_id="new",
                                                     mq_set=[mq(0)]), timeout=10)
    assert [m.queue_id for m in r.lock_ok_mq_set] == [0]
    assert commit(4, "new") == common_pb2.SUCCESS
    assert commit(3, "old") == common_pb2.NO_PERMISSION
    b.messaging.PullMessage(M.PullMessageRequest(
        consumer_group="G", topic="T", queue_id=0, queue_offset=3, max_msg_nums=1,
        subscription="*", commit_offset=3, client_id="old"), timeout=10)
    assert committed() == 4
    b.messaging.PullMessage(M.PullMessageRequest(
        consumer_group="G", topic="T", queue_id=0, queue_offset=5, max_msg_nums=1,
        subscription="*", commit_offset=5, client_id="new"), timeout=10)
    assert committed() == 5
    assert commit(2, "") == common_pb2.SUCCESS  # no client named: an admin's
    assert committed() == 2
