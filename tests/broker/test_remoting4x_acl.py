"""The remoting port with aclEnable, by a protocol-level client signing as RocketMQ 4.x
clients do: unsigned and badly signed requests refused, each account within its rights."""

from __future__ import annotations

import time
from collections.abc import Callable

from broker.remoting4x.acl import signature
from remoting import codes
from remoting.command import RemotingCommand
from tests.acl.conftest import KEYS, acl_broker, acl_file  # noqa: F401  (fixtures)
from tests.support.brokers import BrokerThread
from tests.support.remoting_client import RemotingClient, properties


def signed(access_key: str, code: int, ext: dict[str, object], body: bytes = b""
           ) -> dict[str, object]:
    fields = {**ext, "AccessKey": access_key, "OnsChannel": "ALIYUN"}
    cmd = RemotingCommand(code=code, ext_fields=fields, body=body)
    return {**fields, "Signature": signature(KEYS[access_key], cmd)}


def send_ext(topic: str) -> dict[str, object]:
    return {"producerGroup": "PG", "topic": topic, "queueId": 0, "sysFlag": 0,
            "bornTimestamp": str(int(time.time() * 1000)), "flag": 0,
            "properties": properties(TAGS="t")}


def test_signatures_and_permissions(acl_broker: Callable[..., BrokerThread]  # noqa: F811
                                    ) -> None:
    broker = acl_broker(autoCreateTopicEnable=True)
    with RemotingClient(broker.controller.addresses.remoting_addr) as c:
        ok = c.call(codes.SEND_MESSAGE, signed("producer", codes.SEND_MESSAGE,
                                               send_ext("orders"), b"b"), b"b")
        assert ok.code == 0, ok
        bare = c.call(codes.SEND_MESSAGE, send_ext("orders"), b"b")
        assert bare.code == codes.NO_PERMISSION and "AccessKey" in bare.remark
        forged = signed("producer", codes.SEND_MESSAGE, send_ext("orders"), b"b")
        tampered = c.call(codes.SEND_MESSAGE, forged, b"other body")
        assert tampered.code == codes.NO_PERMISSION and "signature" in tampered.remark
        denied = c.call(codes.SEND_MESSAGE, signed("producer", codes.SEND_MESSAGE,
                                                   send_ext("secret"), b"b"), b"b")
        assert denied.code == codes.NO_PERMISSION and "secret" in denied.remark
        stranger = signed("producer", codes.SEND_MESSAGE, send_ext("orders"), b"b")
        stranger["AccessKey"] = "nobody"
        assert c.call(codes.SEND_MESSAGE, stranger, b"b").code == codes.NO_PERMISSION
        pull = {"consumerGroup": "billing", "topic": "orders", "queueId": 0,
                "queueOffset": 0, "maxMsgNums": 8, "sysFlag": 4, "subscription": "*",
                "commitOffset": -1, "suspendTimeoutMillis": 0}
        by_producer = c.call(codes.PULL_MESSAGE, signed("producer", codes.PULL_MESSAGE, pull))
        assert by_producer.code == codes.NO_PERMISSION
        by_consumer = c.call(codes.PULL_MESSAGE, signed("consumer", codes.PULL_MESSAGE, pull))
        assert by_consumer.code in (0, codes.PULL_NOT_FOUND), by_consumer
        other_group = c.call(codes.PULL_MESSAGE, signed(
            "consumer", codes.PULL_MESSAGE, {**pull, "consumerGroup": "audit"}))
        assert other_group.code == codes.NO_PERMISSION

