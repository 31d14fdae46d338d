"""Messages cross between the official SDK (v2) and this project's mqclient both ways, with
tags, keys, user properties and message ids intact."""

from __future__ import annotations

import threading

from mqclient import ConsumeFromWhere, ConsumeStatus, Message, MessageExt, Producer, PushConsumer
from tests.proxy.conftest import Sdk, V2Cluster
from tests.support.waiting import wait_until

TOPIC = "V2Interop"


def test_mqclient_producer_to_sdk_simple_consumer(sdk: Sdk, v2_cluster: V2Cluster) -> None:
    broker = v2_cluster.start_broker()
    broker.node.create_topic(TOPIC, 4)
    with Producer("PG", v2_cluster.namesrv.address) as producer:
        results = [producer.send(Message(TOPIC, f"mq{i}".encode(), tags="TagM",
                                         keys=[f"key{i}"], properties={"from": "mqclient"}))
                   for i in range(4)]
    ids = {f"mq{i}": r.msg_id for i, r in enumerate(results)}
    got = sdk.receive(broker.endpoint, TOPIC, "GroupFromMq", count=4, ack="all")
    assert sorted(m["body"] for m in got) == sorted(ids)
    for m in got:
        assert m["id"] == ids[m["body"]]
        assert m["tag"] == "TagM"
        assert m["keys"] == [f"key{m['body'][2:]}"]
        assert m["props"] == {"from": "mqclient"}


def test_sdk_producer_to_mqclient_push_consumer(sdk: Sdk, v2_cluster: V2Cluster) -> None:
    broker = v2_cluster.start_broker()
    broker.node.create_topic(TOPIC, 4)
    lock = threading.Lock()
    received: dict[str, MessageExt] = {}

    def listener(msgs: list[MessageExt]) -> ConsumeStatus:
        with lock:
            for m in msgs:
                received[m.body.decode()] = m
        return ConsumeStatus.CONSUME_SUCCESS

    consumer = PushConsumer("GroupFromSdk", v2_cluster.namesrv.address,
                            consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
    consumer.subscribe(TOPIC, "TagS")
    consumer.register_listener_concurrently(listener)
    consumer.start()
    try:
        sent = sdk.send(broker.endpoint, TOPIC, [
            {"body": f"sdk{i}", "tag": "TagS", "keys": [f"k{i}"], "props": {"from": "sdk"}}
            for i in range(4)])
        wait_until(lambda: len(received) >= 4, timeout=30, message="4 messages consumed")
    finally:
        consumer.shutdown()
    for s in sent:
        m = received[s["body"]]
        assert m.msg_id == s["id"]
        assert m.tags == "TagS"
        assert m.keys == [f"k{s['body'][3:]}"]
        assert m.properties.get("from") == "sdk"


def test_compressed_bodies_reach_the_sdk_decompressed(sdk: Sdk, v2_cluster: V2Cluster) -> None:
    """RocketMQ's proxy reads messages decompressing their bodies (decodeDecompressBody):
    the SDK gets each body as produced, whatever its producer compressed it with."""
    broker = v2_cluster.start_broker()
    broker.node.create_topic("V2Compressed", 1)
    bodies = {}
    for kind in ("zlib", "zstd", "lz4"):
        with Producer(f"PG-{kind}", v2_cluster.namesrv.address, compress_type=kind,
                      compress_msg_body_over_howmuch=100) as producer:
            body = f'{{"kind": "{kind}", "items": [{", ".join(["1"] * 500)}]}}'
            r = producer.send(Message("V2Compressed", body.encode(), tags=kind))
            bodies[r.msg_id] = body
    got = sdk.receive(broker.endpoint, "V2Compressed", "GroupCompressed", count=3, ack="all")
    assert {m["id"]: m["body"] for m in got} == bodies
