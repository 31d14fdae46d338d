"""The unmodified official Python SDK (rocketmq-python-client, pinned) against a broker's
v2 endpoint: Producer sends (normal, keys and properties, FIFO, delayed), SimpleConsumer
receive / ack / change invisible duration / redelivery, the DLQ after the max attempts, a
broker killed with messages in flight, and the group's lag in mqadmin."""

from __future__ import annotations

import re
import subprocess
import sys
import time

import grpc
import pytest

from mqproto import namesrv_pb2, namesrv_pb2_grpc
from mqproto.v2 import definition_pb2, service_pb2, service_pb2_grpc
from tests.proxy.conftest import MAX_ATTEMPTS, Sdk, V2Cluster
from tests.support.waiting import wait_until

TOPIC = "V2Topic"


def specs(n: int, prefix: str = "m", **extra: object) -> list[dict[str, object]]:
    return [{"body": f"{prefix}{i}", **extra} for i in range(n)]


def consumer_progress(cluster: V2Cluster, group: str) -> str:
    progress = subprocess.run(
        [sys.executable, "-m", "mqclient.cli.mqadmin", "consumerProgress",
         "-n", cluster.namesrv.address, "-g", group],
        capture_output=True, text=True, timeout=60)
    assert progress.returncode == 0, progress.stderr
    return progress.stdout


def diff_total(cluster: V2Cluster, group: str) -> int:
    match = re.search(r"Consume Diff Total: (\d+)", consumer_progress(cluster, group))
    assert match is not None
    return int(match[1])


def test_send_receive_ack_keeps_tags_keys_properties_ids(sdk: Sdk, v2_cluster: V2Cluster
                                                         ) -> None:
    broker = v2_cluster.start_broker()
    broker.node.create_topic(TOPIC, 4)
    sent = sdk.send(broker.endpoint, TOPIC, [
        {"body": f"b{i}", "tag": "TagA", "keys": [f"key-{i}", f"other-{i}"],
         "props": {"color": "red", "n": str(i)}} for i in range(6)])
    assert all("error" not in s for s in sent), sent
    got = sdk.receive(broker.endpoint, TOPIC, "GroupA", count=6, ack="all", timeout_s=30)
    assert sorted(m["body"] for m in got) == [f"b{i}" for i in range(6)]
    ids = {s["body"]: s["id"] for s in sent}
    for m in got:
        i = m["body"][1:]
        assert m["id"] == ids[m["body"]]
        assert m["tag"] == "TagA"
        assert m["keys"] == sorted([f"key-{i}", f"other-{i}"])
        assert m["props"] == {"color": "red", "n": i}
        assert m["attempt"] == 1
    # Acked: nothing again, even after the invisible duration.
    assert sdk.receive(broker.endpoint, TOPIC, "GroupA", count=1, timeout_s=3) == []
    # The group's lag as any group's: consumerProgress shows its offsets, diff 0.
    assert TOPIC in consumer_progress(v2_cluster, "GroupA")
    assert diff_total(v2_cluster, "GroupA") == 0


def test_tag_filter(sdk: Sdk, v2_cluster: V2Cluster) -> None:
    broker = v2_cluster.start_broker()
    broker.node.create_topic(TOPIC, 2)
    sdk.send(broker.endpoint, TOPIC, specs(3, "a", tag="TagA") + specs(3, "b", tag="TagB"))
    got = sdk.receive(broker.endpoint, TOPIC, "GroupTag", count=3, ack="all", tag="TagB")
    assert sorted(m["body"] for m in got) == ["b0", "b1", "b2"]
    assert sdk.receive(broker.endpoint, TOPIC, "GroupTag", count=1, tag="TagB",
                       timeout_s=3) == []


def test_sql92_filter(sdk: Sdk, v2_cluster: V2Cluster) -> None:
    broker = v2_cluster.start_broker(enablePropertyFilter=True)
    broker.node.create_topic(TOPIC, 2)
    sdk.send(broker.endpoint, TOPIC, [{"body": f"s{i}", "props": {"n": str(i)}}
                                      for i in range(6)])
    got = sdk.receive(broker.endpoint, TOPIC, "GroupSql", count=3, ack="all", sql="n > 2")
    assert sorted(m["body"] for m in got) == ["s3", "s4", "s5"]
    bad = sdk.receive(broker.endpoint, TOPIC, "GroupSql2", count=1, sql="n >", timeout_s=3,
                      calls=1)
    assert bad and bad[0]["error"] == "BadRequestException" and bad[0]["code"] == 40010


def test_filters_that_take_nothing_leave_no_lag(sdk: Sdk, v2_cluster: V2Cluster) -> None:
    """What a group's filter skips counts as consumed: its consumer offset moves past it
    (mqadmin consumerProgress, the metrics and the lag analytics read that offset)."""
    broker = v2_cluster.start_broker(enablePropertyFilter=True)
    broker.node.create_topic(TOPIC, 2)
    sdk.send(broker.endpoint, TOPIC, specs(6, "b", tag="TagB", props={"n": "1"}))
    assert sdk.receive(broker.endpoint, TOPIC, "GroupNoTag", count=1, tag="TagA",
                       timeout_s=3) == []
    assert diff_total(v2_cluster, "GroupNoTag") == 0
    assert sdk.receive(broker.endpoint, TOPIC, "GroupNoSql", count=1, sql="n > 100",
                       timeout_s=3) == []
    assert diff_total(v2_cluster, "GroupNoSql") == 0


def test_redelivery_after_invisible_duration_then_dlq(sdk: Sdk, v2_cluster: V2Cluster) -> None:
    broker = v2_cluster.start_broker()
    broker.node.create_topic(TOPIC, 2)
    sent = sdk.send(broker.endpoint, TOPIC, specs(2, keys=["dead"]))
    ids = sorted(s["id"] for s in sent)
    for attempt in range(1, MAX_ATTEMPTS + 1):
        got = sdk.receive(broker.endpoint, TOPIC, "GroupRe", count=2, invisible_s=1,
                          timeout_s=20)
        assert sorted(m["id"] for m in got) == ids
        assert {m["attempt"] for m in got} == {attempt}
        if attempt == 1:
            assert diff_total(v2_cluster, "GroupRe") == 2  # received, not acked: lag
    # Out of attempts: both move to %DLQ%GroupRe, and are not delivered again.
    wait_until(lambda: broker.node.max_offset("%DLQ%GroupRe", 0) == 2, timeout=15,
               message="2 messages in %DLQ%GroupRe")
    assert sdk.receive(broker.endpoint, TOPIC, "GroupRe", count=1, timeout_s=3) == []


def test_change_invisible_duration(sdk: Sdk, v2_cluster: V2Cluster) -> None:
    broker = v2_cluster.start_broker()
    broker.node.create_topic(TOPIC, 1)
    sdk.send(broker.endpoint, TOPIC, specs(1))
    got = sdk.receive(broker.endpoint, TOPIC, "GroupInv", count=1, invisible_s=1, change_s=12)
    assert got[0]["changed"]
    started = time.monotonic()
    # Invisible 12 s from the change, not 1 s: a receive for 4 s finds nothing.
    assert sdk.receive(broker.endpoint, TOPIC, "GroupInv", count=1, timeout_s=4) == []
    again = sdk.receive(broker.endpoint, TOPIC, "GroupInv", count=1, ack="all", timeout_s=30)
    assert again[0]["body"] == "m0" and again[0]["attempt"] == 2
    assert time.monotonic() - started >= 4


def test_fifo_and_delayed_sends(sdk: Sdk, v2_cluster: V2Cluster) -> None:
    broker = v2_cluster.start_broker()
    broker.node.create_topic(TOPIC, 4)
    fifo = sdk.send(broker.endpoint, TOPIC, specs(8, "f", group="order-1"))
    assert all("error" not in s for s in fifo), fifo
    # One message of a group in flight at a time: a batch of 16 brings f0 only.
    first = sdk.receive(broker.endpoint, TOPIC, "GroupFifo", count=8, invisible_s=2, calls=1)
    assert [m["body"] for m in first] == ["f0"]
    got = sdk.receive(broker.endpoint, TOPIC, "GroupFifo", count=8, ack="all")
    assert [m["body"] for m in got] == [f"f{i}" for i in range(8)]  # one queue, in order
    assert [m["attempt"] for m in got] == [2] + [1] * 7
    assert {m["group"] for m in got} == {"order-1"}

    broker.node.create_topic("V2Delay", 1)
    delayed = sdk.send(broker.endpoint, "V2Delay", specs(1, "d", delay_s=3))
    assert "error" not in delayed[0], delayed
    got = sdk.receive(broker.endpoint, "V2Delay", "GroupDelay", count=1, ack="all",
                      timeout_s=30)
    assert got[0]["body"] == "d0"
    # Due 3 s after the send's second (the SDK's timestamps are whole seconds): not the
    # 5 s delay level, and not early.
    due_ms = got[0]["delivery_ts"]
    assert due_ms is not None and due_ms % 1000 == 0
    assert 1000 < due_ms - delayed[0]["sent_at_ms"] <= 3000
    assert due_ms <= got[0]["received_at_ms"] < due_ms + 1000


@pytest.mark.parametrize("kill", [True, False], ids=["SIGKILL", "SIGTERM"])
def test_unacked_messages_survive_a_broker_restart(sdk: Sdk, v2_cluster: V2Cluster,
                                                   kill: bool) -> None:
    broker = v2_cluster.start_broker()
    broker.node.create_topic(TOPIC, 4)
    sent = sdk.send(broker.endpoint, TOPIC, specs(10, "k"))
    ids = sorted(s["id"] for s in sent)
    # 6 acked, 4 received and not acked when the broker is killed.
    first = sdk.receive(broker.endpoint, TOPIC, "GroupKill", count=10, invisible_s=3)
    assert sorted(m["id"] for m in first) == ids
    acked = sdk.receive(broker.endpoint, TOPIC, "GroupKill", count=6, invisible_s=3,
                        ack="all", timeout_s=20)
    acked_ids = {m["id"] for m in acked}
    assert len(acked_ids) == 6
    broker.restart(kill=kill)
    after = sdk.receive(broker.endpoint, TOPIC, "GroupKill", count=4, ack="all",
                        timeout_s=30)
    assert sorted(m["id"] for m in after) == sorted(set(ids) - acked_ids)
    assert all(m["attempt"] >= 2 for m in after)
    assert sdk.receive(broker.endpoint, TOPIC, "GroupKill", count=1, timeout_s=5) == []


def test_push_consumer_retries_a_failed_message(sdk: Sdk, v2_cluster: V2Cluster) -> None:
    broker = v2_cluster.start_broker()
    broker.node.create_topic(TOPIC, 2)
    sent = sdk.send(broker.endpoint, TOPIC, specs(4, "p"))
    assert all("error" not in s for s in sent), sent
    # p1 fails its first delivery: the SDK changes its invisible duration (the first retry
    # delay, 1 s) and it comes again as delivery 2.
    got = sdk.push(broker.endpoint, TOPIC, "GroupPush", count=4, fail=["p1"], timeout_s=60)
    done = {m["body"] for m in got if m["result"] == "SUCCESS"}
    assert done == {"p0", "p1", "p2", "p3"}
    p1 = [(m["attempt"], m["result"]) for m in got if m["body"] == "p1"]
    assert p1 == [(1, "FAILURE"), (2, "SUCCESS")]
    assert sdk.receive(broker.endpoint, TOPIC, "GroupPush", count=1, timeout_s=3) == []


def test_two_brokers_one_endpoint(sdk: Sdk, v2_cluster: V2Cluster) -> None:
    """The SDK is pointed at one broker; the route names both brokers' v2 endpoints (the
    other's learnt from its runtime table) and it sends to and receives from both."""
    a = v2_cluster.start_broker("broker-a")
    b = v2_cluster.start_broker("broker-b")
    a.node.create_topic(TOPIC, 2)
    b.node.create_topic(TOPIC, 2)
    with grpc.insecure_channel(v2_cluster.namesrv.address) as channel:
        namesrv = namesrv_pb2_grpc.NamesrvServiceStub(channel)
        wait_until(lambda: len(namesrv.GetRouteInfoByTopic(namesrv_pb2.GetRouteInfoByTopicRequest(
            topic=TOPIC), timeout=5).topic_route_data.queue_datas) == 2,
            message="the route lists both brokers")
    sent = sdk.send(a.endpoint, TOPIC, specs(12, "two"))
    assert all("error" not in s for s in sent), sent
    assert sum(b.node.max_offset(TOPIC, q) for q in range(2)) > 0  # some went to b
    got = sdk.receive(a.endpoint, TOPIC, "GroupTwo", count=12, ack="all", timeout_s=40)
    assert sorted(m["body"] for m in got) == sorted(f"two{i}" for i in range(12))


def test_first_receive_gets_the_message_another_broker_has(sdk: Sdk, v2_cluster: V2Cluster
                                                          ) -> None:
    """The SDK's SimpleConsumer sends a receive to one queue's broker; the one message of a
    fresh topic is on the other broker. The first receive gets it at once (it waited its
    20 s long polling and came back empty), and its ack reaches the broker that has it."""
    a = v2_cluster.start_broker("broker-a")
    b = v2_cluster.start_broker("broker-b")
    a.node.create_topic(TOPIC, 8)  # most of the SDK's turns start on broker-a
    b.node.create_topic(TOPIC, 1)
    with grpc.insecure_channel(v2_cluster.namesrv.address) as channel:
        namesrv = namesrv_pb2_grpc.NamesrvServiceStub(channel)
        wait_until(lambda: len(namesrv.GetRouteInfoByTopic(namesrv_pb2.GetRouteInfoByTopicRequest(
            topic=TOPIC), timeout=5).topic_route_data.queue_datas) == 2,
            message="the route lists both brokers")
    with grpc.insecure_channel(b.endpoint) as channel:  # stored by broker-b itself
        stored = service_pb2_grpc.MessagingServiceStub(channel).SendMessage(
            service_pb2.SendMessageRequest(messages=[definition_pb2.Message(
                topic=definition_pb2.Resource(name=TOPIC), body=b"fresh",
                system_properties=definition_pb2.SystemProperties(message_id="01AA"))]),
            timeout=10)
    assert stored.status.code == definition_pb2.OK, stored.status
    begin_ms = time.time() * 1000
    got = sdk.receive(a.endpoint, TOPIC, "GroupFresh", count=1, await_s=20, calls=1,
                      ack="all", timeout_s=60)
    assert [m["body"] for m in got] == ["fresh"]
    assert got[0]["received_at_ms"] - begin_ms < 10_000  # SDK start-up + one receive
    wait_until(lambda: diff_total(v2_cluster, "GroupFresh") == 0, timeout=10,
               message="the ack reached broker-b")


def test_delayed_message_survives_a_broker_kill(sdk: Sdk, v2_cluster: V2Cluster) -> None:
    broker = v2_cluster.start_broker()
    broker.node.create_topic("V2DelayKill", 1)
    sent = sdk.send(broker.endpoint, "V2DelayKill", specs(1, "late", delay_s=4))
    assert "error" not in sent[0], sent
    broker.restart(kill=True)
    got = sdk.receive(broker.endpoint, "V2DelayKill", "GroupDelayKill", count=1, ack="all",
                      timeout_s=40)
    assert [m["body"] for m in got] == ["late0"]
    assert got[0]["received_at_ms"] >= got[0]["delivery_ts"]


def test_transactions_commit_rollback_and_check(sdk: Sdk, v2_cluster: V2Cluster) -> None:
    """Halves through v2 (producer group = the topic, as RocketMQ's proxy): a commit is
    delivered, a rollback never; a half left open is checked through the producer's
    telemetry stream (RecoverOrphanedTransactionCommand) and its answer ends it."""
    broker = v2_cluster.start_broker(transactionCheckInterval=500, transactionTimeOut=500)
    broker.node.create_topic("V2Txn", 2)
    committed = sdk.txn(broker.endpoint, "V2Txn", bodies=["c0", "c1"], end="commit")
    assert all(r["transaction_id"] for r in committed)
    sdk.txn(broker.endpoint, "V2Txn", bodies=["r0"], end="rollback")
    checked = sdk.txn(broker.endpoint, "V2Txn", bodies=["o0"], end="none",
                      checker="commit", linger_s=6)
    assert any(r.get("checked") == "o0" for r in checked), checked
    got = sdk.receive(broker.endpoint, "V2Txn", "GroupTxn", count=3, ack="all", timeout_s=20)
    assert sorted(m["body"] for m in got) == ["c0", "c1", "o0"]
    ids = {r["body"]: r["id"] for r in committed + checked if "body" in r}
    assert all(m["id"] == ids[m["body"]] for m in got)
    assert sdk.receive(broker.endpoint, "V2Txn", "GroupTxn", count=1, timeout_s=3) == []
