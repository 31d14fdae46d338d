"""mqclient with credentials against real processes: a name server with --cluster-key and
a broker with aclEnable. The producer signs its gRPC calls and authenticates its send
channel connections, the push consumer pulls and commits, a client without credentials or
without the permission gets a clear error."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from mqclient import ConsumeFromWhere, Message, MQClientError, Producer, PushConsumer
from mqclient.message import MessageExt
from tests.acl.conftest import CLUSTER_KEY, KEYS
from tests.support.brokers import broker_props, write_conf
from tests.support.processes import Processes

TOPIC = "orders"


@pytest.mark.parametrize("send_channel", [True, False], ids=["send-channel", "grpc"])
def test_producer_and_consumer_with_credentials(processes: Processes, tmp_path: Path,
                                                acl_file: Path, send_channel: bool) -> None:
    ns = processes.namesrv("--cluster-key", CLUSTER_KEY)
    processes.broker(write_conf(tmp_path / "broker.conf", broker_props(
        tmp_path / "store", namesrvAddr=ns.address, aclEnable=True, aclFile=acl_file,
        clusterKey=CLUSTER_KEY, autoCreateTopicEnable=True,
        sendChannelEnable=str(send_channel).lower())))
    admin = Producer("PG", ns.address, access_key="admin", secret_key=KEYS["admin"])
    admin.start()
    try:
        admin.send(Message(TOPIC, b"created"), timeout_s=10)  # auto-creates the topic
    finally:
        admin.shutdown()
    producer = Producer("PG", ns.address, access_key="producer",
                        secret_key=KEYS["producer"])
    producer.start()
    try:
        for i in range(5):
            producer.send(Message(TOPIC, f"m{i}".encode()), timeout_s=10)
        producer.send_batch([Message(TOPIC, b"b1"), Message(TOPIC, b"b2")])
        with pytest.raises(MQClientError, match="NO_PERMISSION.*lacks PUB on topic secret"
                           ) as refused:
            producer.send(Message("secret", b"x"), timeout_s=5)
        # refused by access control: at once, not retried (SEND_FAILED, reason 3 times)
        assert refused.value.code == "NO_PERMISSION"
        assert str(refused.value).count("lacks PUB") == 1
    finally:
        producer.shutdown()
    anonymous = Producer("PG", ns.address)
    anonymous.start()
    try:
        with pytest.raises(MQClientError, match="NO_PERMISSION.*no access key"):
            anonymous.send(Message(TOPIC, b"x"), timeout_s=5)
    finally:
        anonymous.shutdown()

    # an account without SUB on the group: start() fails with the broker's reason
    denied = PushConsumer("billing", ns.address, access_key="producer",
                          secret_key=KEYS["producer"])
    denied.subscribe(TOPIC).register_listener_concurrently(lambda msgs: None)
    with pytest.raises(MQClientError, match="NO_PERMISSION.*account producer lacks SUB"):
        denied.start()

    got: list[bytes] = []
    done = threading.Event()

    def listener(msgs: list[MessageExt]) -> None:
        got.extend(m.body for m in msgs)
        if len(got) >= 8:
            done.set()

    consumer = PushConsumer("billing", ns.address, access_key="consumer",
                            secret_key=KEYS["consumer"],
                            consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
    consumer.subscribe(TOPIC).register_listener_concurrently(listener)
    consumer.start()
    try:
        assert done.wait(30), got
    finally:
        consumer.shutdown()
    assert sorted(got) == sorted([b"created", *(f"m{i}".encode() for i in range(5)),
                                  b"b1", b"b2"])
