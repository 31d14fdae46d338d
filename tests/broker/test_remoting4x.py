"""RocketMQ 4.x remoting on a real name server and broker process, by a protocol-level
client (tests/support/remoting_client.py): routes from the name server's one port, sends
(10, 310, 320), pulls with long polling, offsets, client table, notices, locks, send-back."""

from __future__ import annotations

import json
import socket
import struct
import threading
import time
import zlib
from collections.abc import Iterator

import pytest

from mqclient.admin import MQAdmin
from remoting import codes
from remoting.command import encode
from tests.support.brokers import Node, broker_props, write_conf
from tests.support.processes import Process, Processes
from tests.support.remoting_client import RemotingClient, decode_records, properties
from tests.support.waiting import wait_until


class Cluster:
    def __init__(self, namesrv: Process, broker: Process, node: Node) -> None:
        self.namesrv = namesrv
        self.broker = broker
        self.node = node
        self.remoting = node.runtime().table["remotingAddr"]

    def client(self, where: str = "broker") -> RemotingClient:
        return RemotingClient(self.remoting if where == "broker" else self.namesrv.address)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    tmp = tmp_path_factory.mktemp("remoting4x")
    procs = Processes(tmp)
    try:
        namesrv = procs.namesrv()
        conf = write_conf(tmp / "broker.conf", broker_props(
            tmp / "store", namesrvAddr=namesrv.address, sendChannelFrameTimeoutMills=1000))
        broker = procs.broker(conf)
        node = Node(broker.address)
        c = Cluster(namesrv, broker, node)
        for topic, queues in (("T4", 4), ("TPull", 1), ("TOff", 2), ("TBack", 1)):
            node.create_topic(topic, queues)
        yield c
        node.close()
    finally:
        procs.stop_all()


def send(c: RemotingClient, topic: str, body: bytes, queue_id: int = 0, code: int = 10,
         **props: str) -> dict[str, str]:
    ext = {"producerGroup": "PG", "topic": topic, "defaultTopic": "TBW102",
           "defaultTopicQueueNums": 4, "queueId": queue_id, "sysFlag": 0,
           "bornTimestamp": str(int(time.time() * 1000)), "flag": 0,
           "properties": properties(WAIT="true", **props), "reconsumeTimes": "0",
           "unitMode": "false", "batch": "false"}
    if code == codes.SEND_MESSAGE_V2:
        letters = {v: k for k, v in {
            "a": "producerGroup", "b": "topic", "c": "defaultTopic",
            "d": "defaultTopicQueueNums", "e": "queueId", "f": "sysFlag",
            "g": "bornTimestamp", "h": "flag", "i": "properties", "j": "reconsumeTimes",
            "k": "unitMode", "m": "batch"}.items()}
        ext = {letters[k]: v for k, v in ext.items()}
    answer = c.call(code, ext, body)
    assert answer.code == 0, answer
    return {k: str(v) for k, v in answer.ext_fields.items()}


def dispatched(c: RemotingClient, topic: str, queue_id: int, at_least: int) -> None:
    """Waits until the queue's max offset reaches `at_least` (the store dispatches sends
    to their queues a moment after it answers them)."""
    wait_until(lambda: int(c.call(codes.GET_MAX_OFFSET, {
        "topic": topic, "queueId": queue_id}).ext_fields["offset"]) >= at_least,
        message=f"{topic}-{queue_id} reaches {at_least}")


def pull(c: RemotingClient, topic: str, queue_id: int, offset: int, *, group: str = "CG",
         sub: str = "*", suspend_ms: int = 0, sys_flag: int = 4) -> tuple[int, dict, list]:
    answer = c.call(codes.PULL_MESSAGE, {
        "consumerGroup": group, "topic": topic, "queueId": queue_id, "queueOffset": offset,
        "maxMsgNums": 32, "sysFlag": sys_flag | (2 if suspend_ms else 0),
        "commitOffset": "-1", "suspendTimeoutMillis": suspend_ms, "subscription": sub,
        "subVersion": "0"})
    for value in answer.ext_fields.values():
        assert isinstance(value, str)  # the C++ client reads only strings
    return answer.code, answer.ext_fields, decode_records(answer.body)


def test_routes_cluster_and_topics_from_the_name_server_s_one_port(cluster: Cluster) -> None:
    with cluster.client("namesrv") as c:
        answer = c.call(codes.GET_ROUTEINFO_BY_TOPIC, {"topic": "T4"})
        assert answer.code == 0, answer
        route = json.loads(answer.body)
        assert route["brokerDatas"] == [{"cluster": "TestCluster", "brokerName": "broker-a",
                                         "brokerAddrs": {"0": cluster.remoting}}]
        assert route["queueDatas"] == [{"brokerName": "broker-a", "readQueueNums": 4,
                                        "writeQueueNums": 4, "perm": 6, "topicSynFlag": 0}]
        missing = c.call(codes.GET_ROUTEINFO_BY_TOPIC, {"topic": "NoSuchTopic"})
        assert missing.code == codes.TOPIC_NOT_EXIST and "NoSuchTopic" in missing.remark
        unknown = c.call(9999)
        assert unknown.code == codes.REQUEST_CODE_NOT_SUPPORTED and "9999" in unknown.remark
        info = json.loads(c.call(codes.GET_BROKER_CLUSTER_INFO).body)
        assert info["clusterAddrTable"] == {"TestCluster": ["broker-a"]}
        assert info["brokerAddrTable"]["broker-a"]["brokerAddrs"] == {"0": cluster.remoting}
        topics = json.loads(c.call(codes.GET_ALL_TOPIC_LIST_FROM_NAMESERVER).body)
        assert {"T4", "TPull", "TBW102"} <= set(topics["topicList"])
        # The binary header is answered in kind.
        binary = c.call(codes.GET_ROUTEINFO_BY_TOPIC, {"topic": "T4"}, serialize_type=1)
        assert binary.serialize_type == 1 and json.loads(binary.body) == route
    # gRPC on the same port (the broker registered through it; our admin reads it too).
    admin = MQAdmin([cluster.namesrv.address])
    try:
        assert "T4" in admin.topic_list()
    finally:
        admin.close()


def test_sends_of_each_code_are_pulled_back_with_everything_intact(cluster: Cluster) -> None:
    with cluster.client() as c:
        a = send(c, "T4", b"v1 body", 1, KEYS="k1 k2", TAGS="TagA", UNIQ_KEY="0100007F0001",
                 color="red")
        b = send(c, "T4", b"v2 body", 1, code=codes.SEND_MESSAGE_V2, TAGS="TagB")
        assert a["queueId"] == "1" and int(b["queueOffset"]) == int(a["queueOffset"]) + 1
        assert len(a["msgId"]) == 32
        big = zlib.compress(b"x" * 10_000, 5)
        ext = {"producerGroup": "PG", "topic": "T4", "queueId": 1, "sysFlag": 1, "flag": 7,
               "bornTimestamp": "1", "properties": properties(TAGS="TagZ")}
        assert c.call(codes.SEND_MESSAGE, ext, big).code == 0
        dispatched(c, "T4", 1, int(a["queueOffset"]) + 3)
        code, header, records = pull(c, "T4", 1, int(a["queueOffset"]))
        assert code == 0 and int(header["nextBeginOffset"]) == int(a["queueOffset"]) + 3
        first, second, third = records
        assert first["body"] == b"v1 body" and first["topic"] == "T4"
        assert first["properties"]["KEYS"] == "k1 k2" and first["properties"]["color"] == "red"
        assert first["properties"]["UNIQ_KEY"] == "0100007F0001"
        assert first["magic"] == -626843481 and "WAIT" not in first["properties"]
        assert first["commit_log_offset"] == int(a["msgId"][16:], 16)
        # the store host of a record and the offset message id name the remoting port
        # (4.x clients send a failed message back to its store host)
        port = int(cluster.remoting.rpartition(":")[2])
        assert struct.unpack(">i", first["store_host"][4:])[0] == port
        assert int(a["msgId"][8:16], 16) == port
        assert second["properties"]["TAGS"] == "TagB" and second["properties"]["UNIQ_KEY"]
        assert third["sys_flag"] & 1 and third["body"] == big and third["flag"] == 7
        assert zlib.decompress(third["body"]) == b"x" * 10_000
        # Tags filtered by the broker from the expression alone.
        code, _, records = pull(c, "T4", 1, int(a["queueOffset"]), sub="TagA || TagZ")
        assert [r["properties"]["TAGS"] for r in records] == ["TagA", "TagZ"]


def batch_body(*messages: tuple[bytes, str]) -> bytes:
    out = b""
    for body, props in messages:
        p = props.encode()
        size = 4 * 5 + len(body) + 2 + len(p)
        out += struct.pack(">iiiii", size, 0, 0, 0, len(body)) + body + struct.pack(
            ">h", len(p)) + p
    return out


@pytest.mark.parametrize("code", [codes.SEND_MESSAGE, codes.SEND_BATCH_MESSAGE])
def test_batches(cluster: Cluster, code: int) -> None:
    body = batch_body((b"b1", properties(KEYS="x", TAGS="t", WAIT="true")),
                      (b"b2", properties(KEYS="y", u="v")))
    with cluster.client() as c:
        ext = {"producerGroup": "PG", "topic": "T4", "queueId": 2, "sysFlag": 0,
               "bornTimestamp": "1", "flag": 0, "properties": properties(WAIT="true"),
               "batch": "true"}
        if code == codes.SEND_BATCH_MESSAGE:
            ext = {"a": "PG", "b": "T4", "e": "2", "f": "0", "g": "1", "h": "0",
                   "i": properties(WAIT="true"), "m": "true"}
        answer = c.call(code, ext, body)
        assert answer.code == 0, answer
        ids = answer.ext_fields["msgId"].split(",")
        assert len(ids) == 2
        dispatched(c, "T4", 2, int(answer.ext_fields["queueOffset"]) + 2)
        _, _, records = pull(c, "T4", 2, int(answer.ext_fields["queueOffset"]))
        assert [(r["body"], r["properties"].get("KEYS")) for r in records[:2]] == [
            (b"b1", "x"), (b"b2", "y")]
        assert records[1]["properties"]["u"] == "v"
        assert "WAIT" not in records[0]["properties"]


def test_pull_long_polls_until_a_message_arrives(cluster: Cluster) -> None:
    with cluster.client() as c, cluster.client() as p:
        code, header, _ = pull(c, "TPull", 0, 0)
        assert code == codes.PULL_NOT_FOUND and header["maxOffset"] == "0"
        late = threading.Timer(0.5, lambda: send(p, "TPull", b"late"))
        late.start()
        started = time.monotonic()
        code, header, records = pull(c, "TPull", 0, 0, suspend_ms=10_000)
        late.join(10)  # its answer read before the connection closes
        assert code == 0 and [r["body"] for r in records] == [b"late"]
        assert 0.3 < time.monotonic() - started < 5
        assert header["nextBeginOffset"] == "1"
        code, header, _ = pull(c, "TPull", 0, 5)
        assert code == codes.PULL_OFFSET_MOVED or code == codes.PULL_NOT_FOUND


def test_offsets(cluster: Cluster) -> None:
    with cluster.client() as c:
        before = int(time.time() * 1000) - 1
        for i in range(3):
            send(c, "TOff", b"m%d" % i, 0)
        q = {"topic": "TOff", "queueId": 0}
        dispatched(c, "TOff", 0, 3)
        new_group = c.call(codes.QUERY_CONSUMER_OFFSET, {"consumerGroup": "NewG", **q})
        assert (new_group.code, new_group.ext_fields) == (0, {"offset": "0"})
        c.send(codes.UPDATE_CONSUMER_OFFSET, {"consumerGroup": "NewG", "commitOffset": 2, **q},
               oneway=True)
        wait_until(lambda: c.call(codes.QUERY_CONSUMER_OFFSET, {
            "consumerGroup": "NewG", **q}).ext_fields == {"offset": "2"})
        assert c.call(codes.GET_MAX_OFFSET, q).ext_fields == {"offset": "3"}
        assert c.call(codes.GET_MIN_OFFSET, q).ext_fields == {"offset": "0"}
        assert c.call(codes.SEARCH_OFFSET_BY_TIMESTAMP, {**q, "timestamp": before}
                      ).ext_fields == {"offset": "0"}
        earliest = int(c.call(codes.GET_EARLIEST_MSG_STORETIME, q).ext_fields["timestamp"])
        assert before <= earliest <= int(time.time() * 1000)
        bad = c.call(codes.GET_MAX_OFFSET, {"topic": "TOff", "queueId": 9})
        assert bad.code == codes.SYSTEM_ERROR and "queueId[9]" in bad.remark
        missing = c.call(codes.GET_MAX_OFFSET, {"topic": "Nope", "queueId": 0})
        assert missing.code == codes.TOPIC_NOT_EXIST


def heartbeat(c: RemotingClient, client_id: str, group: str, topic: str = "T4") -> None:
    answer = c.call_json(codes.HEART_BEAT, {
        "clientID": client_id, "producerDataSet": [{"groupName": "CLIENT_INNER_PRODUCER"}],
        "consumerDataSet": [{"groupName": group, "consumeType": 1, "messageModel": 1,
                             "consumeFromWhere": 0, "subscriptionDataSet": [
                                 {"topic": topic, "subString": "TagA || TagB",
                                  "tagsSet": ["TagA", "TagB"], "codeSet": [0, 0],
                                  "subVersion": 1},
                                 {"topic": f"%RETRY%{group}", "subString": "*"}]}]})
    assert answer.code == 0, answer


def test_clients_notices_and_locks(cluster: Cluster) -> None:
    with cluster.client() as c1, cluster.client() as c2:
        heartbeat(c1, "client-1", "GroupX")
        ids = c1.call(codes.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "GroupX"})
        assert json.loads(ids.body) == {"consumerIdList": ["client-1"]}
        heartbeat(c2, "client-2", "GroupX")
        # c1 is told of the change (NOTIFY_CONSUMER_IDS_CHANGED, oneway)
        notice = c1.read()
        assert notice.code == codes.NOTIFY_CONSUMER_IDS_CHANGED and notice.is_oneway
        assert notice.ext_fields == {"consumerGroup": "GroupX"}
        ids = json.loads(c1.call(codes.GET_CONSUMER_LIST_BY_GROUP,
                                 {"consumerGroup": "GroupX"}).body)
        assert ids == {"consumerIdList": ["client-1", "client-2"]}
        retry = c1.call(codes.GET_MAX_OFFSET, {"topic": "%RETRY%GroupX", "queueId": 0})
        assert retry.code == 0, retry  # made by the heartbeat
        mqs = [{"topic": "T4", "brokerName": "broker-a", "queueId": i} for i in range(2)]
        lock = {"consumerGroup": "GroupX", "clientId": "client-1", "mqSet": mqs}
        got = json.loads(c1.call_json(codes.LOCK_BATCH_MQ, lock).body)
        assert sorted(m["queueId"] for m in got["lockOKMQSet"]) == [0, 1]
        other = json.loads(c2.call_json(codes.LOCK_BATCH_MQ, {**lock, "clientId": "client-2"}
                                        ).body)
        assert other == {"lockOKMQSet": []}  # well-formed when empty
        assert c1.call_json(codes.UNLOCK_BATCH_MQ, lock).code == 0
        again = json.loads(c2.call_json(codes.LOCK_BATCH_MQ, {**lock, "clientId": "client-2"}
                                        ).body)
        assert len(again["lockOKMQSet"]) == 2
        bad = c1.call(codes.LOCK_BATCH_MQ, {}, b"{not json")
        assert bad.code == codes.SYSTEM_ERROR and "not JSON" in bad.remark
        # A client that unregisters leaves; one whose connection closes leaves too.
        assert c2.call(codes.UNREGISTER_CLIENT, {"clientID": "client-2", "producerGroup": "",
                                                 "consumerGroup": "GroupX"}).code == 0
        assert c1.read().code == codes.NOTIFY_CONSUMER_IDS_CHANGED
    with cluster.client() as c3:
        wait_until(lambda: c3.call(codes.GET_CONSUMER_LIST_BY_GROUP,
                                   {"consumerGroup": "GroupX"}).code == codes.SYSTEM_ERROR)


def test_send_back_goes_to_the_retry_topic(cluster: Cluster) -> None:
    with cluster.client() as c:
        heartbeat(c, "client-b", "GroupB", "TBack")
        sent = send(c, "TBack", b"fails", 0, TAGS="t")
        answer = c.call(codes.CONSUMER_SEND_MSG_BACK, {
            "offset": int(sent["msgId"][16:], 16), "group": "GroupB", "delayLevel": "0",
            "originMsgId": sent["msgId"], "originTopic": "TBack", "maxReconsumeTimes": 16})
        assert answer.code == 0, answer
        code, _, records = pull(c, "%RETRY%GroupB", 0, 0)
        assert code in (0, codes.PULL_NOT_FOUND)  # delayed first: level 3, 10 s
        foreign = send(c, "T4", b"not subscribed", 0)
        refused = c.call(codes.CONSUMER_SEND_MSG_BACK, {
            "offset": int(foreign["msgId"][16:], 16), "group": "GroupB", "delayLevel": "0"})
        assert refused.code == codes.NO_PERMISSION and "subscribe" in refused.remark
        bad = c.call(codes.CONSUMER_SEND_MSG_BACK, {"offset": "x", "group": "GroupB"})
        assert bad.code == codes.SYSTEM_ERROR and "offset" in bad.remark


def _closed(sock: socket.socket, timeout: float = 10) -> bool:
    sock.settimeout(timeout)
    try:
        return sock.recv(1024) == b""
    except ConnectionResetError:
        return True


@pytest.mark.parametrize("where", ["broker", "namesrv"])
@pytest.mark.parametrize(("garbage", "why"), [
    (b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", "over the limit"),
    (struct.pack(">iI", 8, 100) + b"{}{}", "header length 100 past"),
    (struct.pack(">i", 512 * 1024 * 1024), "over the limit"),
    (struct.pack(">iI", 9, 5) + b"{oops", "does not parse"),
])
def test_bad_input_closes_only_that_connection_with_one_clear_line(
        cluster: Cluster, where: str, garbage: bytes, why: str) -> None:
    with cluster.client(where) as good:
        host, _, port = (cluster.remoting if where == "broker"
                         else cluster.namesrv.address).rpartition(":")
        with socket.create_connection((host, int(port))) as bad:
            bad.sendall(garbage)
            assert _closed(bad)
        code = codes.GET_MAX_OFFSET if where == "broker" else codes.GET_ROUTEINFO_BY_TOPIC
        answer = good.call(code, {"topic": "T4", "queueId": 0})
        assert answer.code == 0, answer
    # One line per 10 s at most (a flood of bad connections logs little); each reason's
    # own line: tests/remoting/test_connection.py.
    log = (cluster.broker if where == "broker" else cluster.namesrv).log_text()
    assert "remoting connection from 127.0.0.1:" in log and " closed: " in log


def test_a_half_frame_held_open_is_closed_and_wrong_types_are_answered(cluster: Cluster
                                                                        ) -> None:
    host, _, port = cluster.remoting.rpartition(":")
    with socket.create_connection((host, int(port))) as half:
        half.sendall(struct.pack(">i", 1000) + b"\x00\x00\x00")
        started = time.monotonic()
        assert _closed(half)  # sendChannelFrameTimeoutMills=1000 on this broker
        assert 0.5 < time.monotonic() - started < 8
    with cluster.client() as c:
        for ext in ({"topic": "T4", "queueId": "one"}, {"topic": ["T4"], "queueId": 0},
                    {"topic": "T4", "queueId": True}, {"topic": "T4"}):
            answer = c.call_raw({"code": codes.GET_MAX_OFFSET, "flag": 0, "extFields": ext})
            assert answer.code == codes.SYSTEM_ERROR and "extFields" in answer.remark, answer
        unknown = c.call(4242)
        assert unknown.code == codes.REQUEST_CODE_NOT_SUPPORTED and "4242" in unknown.remark
        assert c.call(codes.GET_MAX_OFFSET, {"topic": "T4", "queueId": 0}).code == 0
        bad_heartbeat = c.call(codes.HEART_BEAT, {}, b"[1, 2]")
        assert bad_heartbeat.code == codes.SYSTEM_ERROR
        assert c.call(codes.HEART_BEAT, {}, b'{"clientID": "x", "consumerDataSet": '
                      b'[{"groupName": "G", "subscriptionDataSet": [{"topic": "T4", '
                      b'"subString": "TagA", "expressionType": "SQL99"}]}]}'
                      ).code == codes.SUBSCRIPTION_PARSE_FAILED


def test_queries_and_admin_views(cluster: Cluster) -> None:
    with cluster.client() as c:
        cluster.node.create_topic("TAdmin", 2)
        sent = send(c, "TAdmin", b"find me", 1, KEYS="order-7", TAGS="t",
                    UNIQ_KEY="AB00000000000000000000000000CDEF")
        dispatched(c, "TAdmin", 1, 1)
        by_key = c.call(codes.QUERY_MESSAGE, {"topic": "TAdmin", "key": "order-7",
                                              "maxNum": 32, "beginTimestamp": 0,
                                              "endTimestamp": str(2**62)})
        assert by_key.code == 0, by_key
        [record] = decode_records(by_key.body)
        assert record["body"] == b"find me" and record["properties"]["KEYS"] == "order-7"
        unique = c.call(codes.QUERY_MESSAGE, {
            "topic": "TAdmin", "key": "AB00000000000000000000000000CDEF", "maxNum": 1,
            "beginTimestamp": 0, "endTimestamp": str(2**62), "_UNIQUE_KEY_QUERY": "true"})
        assert [r["body"] for r in decode_records(unique.body)] == [b"find me"]
        nothing = c.call(codes.QUERY_MESSAGE, {"topic": "TAdmin", "key": "nope", "maxNum": 1,
                                               "beginTimestamp": 0, "endTimestamp": "0"})
        assert nothing.code == codes.QUERY_NOT_FOUND
        by_id = c.call(codes.VIEW_MESSAGE_BY_ID, {"offset": int(sent["msgId"][16:], 16)})
        assert [r["body"] for r in decode_records(by_id.body)] == [b"find me"]
        assert c.call(codes.VIEW_MESSAGE_BY_ID, {"offset": 1 << 40}).code == codes.SYSTEM_ERROR
        runtime = json.loads(c.call(codes.GET_BROKER_RUNTIME_INFO).body)
        assert runtime["table"]["remotingAddr"] == cluster.remoting
        stats = c.call(codes.GET_TOPIC_STATS_INFO, {"topic": "TAdmin"}).body.decode()
        assert ('{"brokerName":"broker-a","queueId":1,"topic":"TAdmin"}:{"minOffset":0,'
                '"maxOffset":1,') in stats
        c.send(codes.UPDATE_CONSUMER_OFFSET, {"consumerGroup": "GA", "topic": "TAdmin",
                                              "queueId": 1, "commitOffset": 1}, oneway=True)
        heartbeat(c, "client-admin", "GA", "TAdmin")
        consume = c.call(codes.GET_CONSUME_STATS, {"consumerGroup": "GA", "topic": "TAdmin"})
        assert ('{"brokerName":"broker-a","queueId":1,"topic":"TAdmin"}:{"brokerOffset":1,'
                '"consumerOffset":1,') in consume.body.decode(), consume
        connections = json.loads(c.call(codes.GET_CONSUMER_CONNECTION_LIST,
                                        {"consumerGroup": "GA"}).body)
        [conn] = connections["connectionSet"]
        assert conn["clientId"] == "client-admin" and conn["language"] == "CPP"
        assert conn["clientAddr"].startswith("127.0.0.1:")
        assert connections["subscriptionTable"]["TAdmin"]["subString"] == "TagA || TagB"
        assert c.call(codes.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": "none"}
                      ).code == codes.CONSUMER_NOT_ONLINE


def test_consumer_running_info_is_relayed_to_the_client_s_connection(cluster: Cluster
                                                                      ) -> None:
    with cluster.client() as consumer, cluster.client() as admin:
        heartbeat(consumer, "client-run", "GroupRun", "TAdmin")
        answered = threading.Event()

        def answer_as_the_client() -> None:
            request = consumer.read()
            assert request.code == codes.GET_CONSUMER_RUNNING_INFO
            assert request.ext_fields["clientId"] == "client-run"
            consumer.sock.sendall(encode(request.response(0, None, body=b'{"jstack":""}')))
            answered.set()

        thread = threading.Thread(target=answer_as_the_client, daemon=True)
        thread.start()
        info = admin.call(codes.GET_CONSUMER_RUNNING_INFO, {
            "consumerGroup": "GroupRun", "clientId": "client-run", "jstackEnable": "false"})
        thread.join(10)
        assert answered.is_set() and info.code == 0 and info.body == b'{"jstack":""}'
        missing = admin.call(codes.GET_CONSUMER_RUNNING_INFO, {
            "consumerGroup": "GroupRun", "clientId": "nobody"})
        assert missing.code == codes.SYSTEM_ERROR and "not online" in missing.remark


def test_a_prepared_message_is_committed_by_end_transaction(cluster: Cluster) -> None:
    cluster.node.create_topic("TTx", 1)
    with cluster.client() as c:
        half = send(c, "TTx", b"in a transaction", 0, TRAN_MSG="true", PGROUP="TPG",
                    UNIQ_KEY="AB0000000000000000000000000000TX")
        assert half["transactionId"] == "AB0000000000000000000000000000TX"
        time.sleep(0.3)
        assert c.call(codes.GET_MAX_OFFSET, {"topic": "TTx", "queueId": 0}
                      ).ext_fields == {"offset": "0"}  # held as a half message
        end = {"producerGroup": "TPG", "tranStateTableOffset": half["queueOffset"],
               "commitLogOffset": str(int(half["msgId"][16:], 16)),
               "commitOrRollback": "8", "fromTransactionCheck": "false",
               "msgId": half["transactionId"], "transactionId": half["transactionId"]}
        answer = c.call(codes.END_TRANSACTION, end)
        assert answer.code == 0, answer
        dispatched(c, "TTx", 0, 1)
        _, _, [record] = pull(c, "TTx", 0, 0)
        assert record["body"] == b"in a transaction"
        bad = c.call(codes.END_TRANSACTION, {**end, "commitOrRollback": "5"})
        assert bad.code == codes.SYSTEM_ERROR and "commitOrRollback" in bad.remark
