"""Consumer offsets, admin service, heartbeats and robustness of a broker in this process."""

from __future__ import annotations

import json
from collections.abc import Callable

import grpc
import pytest

from broker.controller import StoreDirLocked
from broker.persistence import ConfigFileCorrupt
from mqproto import admin_pb2, common_pb2, messaging_pb2
from tests.support.brokers import BrokerThread, code, pull, pull_all, send
from tests.support.processes import send_garbage
from tests.support.waiting import wait_until

M = messaging_pb2
A = admin_pb2
C = common_pb2
Start = Callable[..., BrokerThread]


def commit(b: BrokerThread, topic: str, queue_id: int, offset: int, group: str = "CG"
           ) -> messaging_pb2.UpdateConsumerOffsetResponse:
    return b.messaging.UpdateConsumerOffset(M.UpdateConsumerOffsetRequest(
        consumer_group=group, topic=topic, queue_id=queue_id, commit_offset=offset))


def query(b: BrokerThread, topic: str, queue_id: int, group: str = "CG"
          ) -> messaging_pb2.QueryConsumerOffsetResponse:
    return b.messaging.QueryConsumerOffset(M.QueryConsumerOffsetRequest(
        consumer_group=group, topic=topic, queue_id=queue_id))


def test_commit_and_query_offsets(start_broker: Start) -> None:
    b = start_broker()
    for i in range(3):
        send(b, "O", b"%d" % i, queue_id=1)
    pull_all(b, "O", 1, expect=3)
    assert code(query(b, "O", 1)) == "QUERY_NOT_FOUND"
    assert code(commit(b, "O", 1, 2)) == "SUCCESS"
    assert query(b, "O", 1).offset == 2
    assert code(commit(b, "O", 1, 3)) == "SUCCESS"  # == max offset: everything consumed
    too_far = commit(b, "O", 1, 4)
    assert code(too_far) == "INVALID_PARAMETER" and "[0, 3]" in too_far.status.remark
    assert code(commit(b, "O", 1, -1)) == "INVALID_PARAMETER"
    assert code(commit(b, "O", 99, 0)) == "INVALID_PARAMETER"
    assert code(commit(b, "Nope", 0, 0)) == "TOPIC_NOT_EXIST"
    assert code(commit(b, "O", 1, 0, group="")) == "INVALID_PARAMETER"
    assert query(b, "O", 1).offset == 3  # refused commits changed nothing

    r = pull(b, "O", 1, 1, commit_offset=1)  # piggy-backed commit
    assert code(r) == "SUCCESS" and query(b, "O", 1).offset == 1
    pull(b, "O", 1, 1, commit_offset=500)  # out of range: ignored, the pull is served
    assert query(b, "O", 1).offset == 1


def test_offsets_persist_periodically(start_broker: Start) -> None:
    b = start_broker(flushConsumerOffsetInterval=100)
    send(b, "O", b"x")
    pull_all(b, "O", 0, expect=1)
    commit(b, "O", 0, 1, group="G1")
    path = b.controller.root / "config" / "consumerOffset.json"
    wait_until(lambda: path.exists() and "O@G1" in path.read_text(), timeout=5,
               message="periodic offset persistence")
    assert json.loads(path.read_text())["offsetTable"]["O@G1"] == {"0": 1}


def test_admin_topics(start_broker: Start) -> None:
    b = start_broker()
    r = b.admin.CreateOrUpdateTopic(A.CreateOrUpdateTopicRequest(topic_config=C.TopicConfig(
        topic_name="Admin1", read_queue_nums=3, write_queue_nums=3, perm=6)))
    assert code(r) == "SUCCESS"
    listed = b.admin.GetTopicList(A.GetTopicListRequest())
    names = {t.topic_name: t for t in listed.topic_configs}
    assert names["Admin1"].read_queue_nums == 3
    assert {"TBW102", "SCHEDULE_TOPIC_XXXX", "TestCluster", "broker-a"} <= set(names)
    version = listed.data_version.counter
    for bad in (C.TopicConfig(topic_name="bad name", read_queue_nums=1, write_queue_nums=1),
                C.TopicConfig(topic_name="Z", read_queue_nums=0, write_queue_nums=0),
                C.TopicConfig(topic_name="RMQ_SYS_TRANS_HALF_TOPIC", read_queue_nums=1,
                              write_queue_nums=1),
                C.TopicConfig(topic_name="TestCluster", read_queue_nums=1,
                              write_queue_nums=1)):
        refused = b.admin.CreateOrUpdateTopic(A.CreateOrUpdateTopicRequest(topic_config=bad))
        assert code(refused) == "INVALID_PARAMETER", bad
    assert b.admin.GetTopicList(A.GetTopicListRequest()).data_version.counter == version

    read_only = b.admin.CreateOrUpdateTopic(A.CreateOrUpdateTopicRequest(
        topic_config=C.TopicConfig(topic_name="Admin1", read_queue_nums=3,
                                   write_queue_nums=3, perm=4)))
    assert code(read_only) == "SUCCESS"
    assert code(send(b, "Admin1", b"x")) == "NO_PERMISSION"
    assert code(b.admin.DeleteTopic(A.DeleteTopicRequest(topic="Admin1"))) == "SUCCESS"
    assert code(b.admin.DeleteTopic(A.DeleteTopicRequest(topic="Admin1"))) == "TOPIC_NOT_EXIST"


def test_runtime_info_and_consume_stats(start_broker: Start) -> None:
    b = start_broker()
    for i in range(4):
        send(b, "S", b"%d" % i, queue_id=0)
    pull_all(b, "S", 0, expect=4)
    commit(b, "S", 0, 1, group="G1")
    info = b.admin.GetRuntimeInfo(A.GetRuntimeInfoRequest())
    assert code(info) == "SUCCESS"
    for key in ("commitLogMinOffset", "commitLogMaxOffset", "dispatchBehindBytes", "putTps",
                "getTotalTps", "brokerRole", "brokerAddr"):
        assert key in info.table, key
    assert info.commit_log_max_offset == b.controller.store.max_phy_offset > 0
    assert info.broker_name == "broker-a" and info.broker_role == "ASYNC_MASTER"
    assert info.put_tps > 0 and info.earliest_message_store_timestamp > 0

    stats = b.admin.GetConsumeStats(A.GetConsumeStatsRequest(consumer_group="G1"))
    assert code(stats) == "SUCCESS"
    [group] = stats.consume_stats
    by_queue = {w.queue_id: w for w in group.offset_table}
    w0 = by_queue[0]
    assert (w0.topic, w0.broker_name, w0.broker_offset, w0.consumer_offset) == (
        "S", "broker-a", 4, 1)
    assert 0 < w0.last_timestamp <= w0.first_unconsumed_timestamp
    assert w0.last_commit_timestamp > 0 and w0.queue_min_offset == 0
    assert w0.lag_bytes_exact and w0.lag_bytes == 3 * (w0.lag_bytes // 3) > 0  # 3 alike
    assert len(by_queue) == 8 and by_queue[5].broker_offset == 0
    # Never committed is -1 (as RocketMQ answers), not 0.
    assert (by_queue[5].consumer_offset, by_queue[5].last_commit_timestamp) == (-1, 0)
    assert group.online_consumers == 0
    unknown = b.admin.GetConsumeStats(A.GetConsumeStatsRequest(consumer_group="nobody"))
    assert code(unknown) == "SUBSCRIPTION_GROUP_NOT_EXIST"
    every = b.admin.GetConsumeStats(A.GetConsumeStatsRequest())
    assert [s.consumer_group for s in every.consume_stats] == ["G1"]

    offsets = b.admin.GetAllConsumerOffset(A.GetAllConsumerOffsetRequest())
    assert [(e.topic, e.consumer_group, e.queue_id, e.offset) for e in offsets.offset_table] == [
        ("S", "G1", 0, 1)]
    ha = b.admin.GetHAStatus(A.GetHAStatusRequest())
    assert ha.master and ha.master_commit_log_max_offset == info.commit_log_max_offset
    assert code(b.admin.GetAllDelayOffset(A.GetAllDelayOffsetRequest())) == "SUCCESS"


def reset(b: BrokerThread, target: int, timestamp: int = 0, force: bool = False,
          topic: str = "R", group: str = "RG") -> admin_pb2.ResetOffsetResponse:
    return b.admin.ResetOffset(A.ResetOffsetRequest(
        consumer_group=group, topic=topic, target=target, timestamp=timestamp, force=force))


def test_reset_offsets(start_broker: Start) -> None:
    now = [1_700_000_000_000]
    b = start_broker({"clock_ms": lambda: now[0]})
    for i in range(5):
        now[0] += 1000
        send(b, "R", b"%d" % i, queue_id=0)
    pull_all(b, "R", 0, expect=5)
    commit(b, "R", 0, 4, group="RG")
    committed_at = b.call(lambda: b.controller.offsets.last_commit_time("RG", "R", 0))
    r = reset(b, A.RESET_TO_EARLIEST)
    assert code(r) == "SUCCESS"
    assert [(q.queue_id, q.old_offset, q.new_offset) for q in r.queues][:2] == [
        (0, 4, 0), (1, -1, 0)]
    assert query(b, "R", 0, group="RG").offset == 0
    # A reset is not a consumer's commit: the last commit time stays.
    assert b.call(lambda: b.controller.offsets.last_commit_time("RG", "R", 0)) == committed_at
    r = reset(b, A.RESET_TO_TIMESTAMP, 1_700_000_003_000)  # message 2 was stored then
    assert r.queues[0].new_offset == 2
    assert reset(b, A.RESET_TO_LATEST).queues[0].new_offset == 5
    assert code(reset(b, A.RESET_TO_LATEST, topic="Nope")) == "TOPIC_NOT_EXIST"
    assert code(reset(b, 0)) == "INVALID_PARAMETER"
    assert code(reset(b, A.RESET_TO_LATEST, group="")) == "INVALID_PARAMETER"

    # A consumer of the group online: refused, nothing changed; forced, it is told.
    b.messaging.Heartbeat(M.HeartbeatRequest(
        client_id="c1", consumer_group="RG",
        subscriptions=[M.ConsumerSubscription(topic="R", sub_string="*")]))
    watch = b.messaging.WatchConsumerGroup(M.WatchConsumerGroupRequest(
        consumer_group="RG", client_id="c1"), timeout=30)
    assert list(next(watch).consumer_id_list) == ["c1"]
    refused = reset(b, A.RESET_TO_EARLIEST)
    assert code(refused) == "CONSUMER_ONLINE" and "c1" in refused.status.remark
    assert query(b, "R", 0, group="RG").offset == 5
    assert code(reset(b, A.RESET_TO_EARLIEST, force=True)) == "SUCCESS"
    notice = next(watch)
    assert list(notice.consumer_id_list) == ["c1"]
    assert (notice.reset.topic, notice.reset.broker_name) == ("R", "broker-a")
    assert dict(notice.reset.offsets) == {q: 0 for q in range(8)}
    watch.cancel()


def test_heartbeats_and_consumer_list(start_broker: Start) -> None:
    b = start_broker()
    none = b.messaging.GetConsumerListByGroup(M.GetConsumerListByGroupRequest(
        consumer_group="CG"))
    assert code(none) == "CONSUMER_NOT_ONLINE"
    for client in ("c2", "c1"):
        r = b.messaging.Heartbeat(M.HeartbeatRequest(
            client_id=client, consumer_group="CG",
            subscriptions=[M.ConsumerSubscription(topic="T", sub_string="*")]))
        assert code(r) == "SUCCESS"
    listed = b.messaging.GetConsumerListByGroup(M.GetConsumerListByGroupRequest(
        consumer_group="CG"))
    assert list(listed.consumer_id_list) == ["c1", "c2"]
    assert code(b.messaging.Heartbeat(M.HeartbeatRequest())) == "INVALID_PARAMETER"


def test_requests_naming_no_group_are_refused(start_broker: Start) -> None:
    b = start_broker()
    # Transactions and queue locks are served; a request naming no group is refused.
    assert code(b.messaging.EndTransaction(M.EndTransactionRequest())) == "INVALID_PARAMETER"
    assert code(b.messaging.LockBatchMQ(M.LockBatchMQRequest())) == "INVALID_PARAMETER"
    with pytest.raises(grpc.RpcError) as e:
        next(iter(b.messaging.SubscribeTransactionCheck(M.SubscribeTransactionCheckRequest())))
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_garbage_on_the_port_is_survived(start_broker: Start) -> None:
    b = start_broker()
    for payload in (b"\x00\xffgarbage" * 100, b"GET / HTTP/1.1\r\n\r\n",
                    b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\xff" * 64):
        send_garbage(b.address, payload)
    # A well-framed call whose body is not the request message.
    raw = b.channel.unary_unary("/mqcluster.v1.MessagingService/SendMessage",
                                request_serializer=None, response_deserializer=None)
    with pytest.raises(grpc.RpcError) as e:
        raw(b"\xff\xff\xff\xff\x0f garbage", timeout=5)
    assert e.value.code() in (grpc.StatusCode.INTERNAL, grpc.StatusCode.INVALID_ARGUMENT,
                              grpc.StatusCode.UNKNOWN)
    assert code(send(b, "T", b"still here")) == "SUCCESS"
    assert [m.body for m in pull_all(b, "T", 0, expect=1)] == [b"still here"]


def test_one_broker_per_store_dir(start_broker: Start) -> None:
    start_broker()
    with pytest.raises(StoreDirLocked, match="in use by another broker"):
        start_broker()


def test_restart_loads_bak_when_config_files_are_corrupt(start_broker: Start) -> None:
    b = start_broker(flushConsumerOffsetInterval=100)
    send(b, "Kept", b"x")
    pull_all(b, "Kept", 0, expect=1)
    commit(b, "Kept", 0, 1)
    config_dir = b.controller.root / "config"
    offsets_file = config_dir / "consumerOffset.json"
    wait_until(lambda: offsets_file.exists() and "Kept" in offsets_file.read_text(),
               message="periodic offset persistence")
    b.stop()  # persists both tables again; the previous versions become the .bak files
    for name in ("topics.json", "consumerOffset.json"):
        assert "Kept" in (config_dir / f"{name}.bak").read_text()
        (config_dir / name).write_text('{"torn')
    again = start_broker()
    assert again.call(lambda: again.controller.topics.get("Kept")) is not None
    assert query(again, "Kept", 0).offset == 1


def test_refuses_to_start_when_no_copy_is_readable(start_broker: Start) -> None:
    b = start_broker()
    b.stop()
    config_dir = b.controller.root / "config"
    for name in ("topics.json", "topics.json.bak"):
        (config_dir / name).write_text("garbage")
    with pytest.raises(ConfigFileCorrupt, match="topics.json"):
        start_broker()
