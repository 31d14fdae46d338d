"""A consumer of many queues commits every one at shutdown (a trial's consumer of 1,600
queues left some uncommitted, delivered again: all its commit calls went out at once and
some came back CANCELLED; now at most 32 are in flight, and the final commit's bound grows
with the queues)."""

from __future__ import annotations

import threading

from mqclient import ConsumeFromWhere, Message, Producer, PushConsumer
from mqclient.admin import MQAdmin
from mqclient.message import MessageExt
from tests.mqclient.conftest import Cluster
from tests.mqclient.test_consumer import committed_offset

TOPICS = [f"ManyQ{i:03d}" for i in range(200)]  # x 8 queues: 1,600


def test_shutdown_commits_every_queue_of_many(cluster: Cluster) -> None:
    broker = cluster.start_broker("broker-a")
    with MQAdmin(cluster.namesrv_addr) as admin:
        admin.create_topics(TOPICS, broker_addr=broker.address)
    with Producer("ManyQP", cluster.namesrv_addr) as producer:
        sent = [producer.send(Message(topic, b"x")) for topic in TOPICS]
    received: set[str] = set()
    lock = threading.Lock()
    done = threading.Event()

    def listener(msgs: list[MessageExt]) -> None:
        with lock:
            received.update(m.topic for m in msgs)
            if len(received) == len(TOPICS):
                done.set()

    # No periodic commit before the shutdown: the final one has to do it all.
    consumer = PushConsumer("ManyQG", cluster.namesrv_addr, persist_offset_interval_s=3600,
                            consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
    for topic in TOPICS:
        consumer.subscribe(topic)
    consumer.register_listener_concurrently(listener)
    consumer.start()
    try:
        assert done.wait(120), f"{len(received)} of {len(TOPICS)} topics consumed"
    finally:
        consumer.shutdown()
    missing = [(r.message_queue.topic, r.message_queue.queue_id) for r in sent
               if committed_offset(broker.address, "ManyQG", r.message_queue.topic,
                                   r.message_queue.queue_id) != r.queue_offset + 1]
    assert not missing, f"{len(missing)} consumed queues not committed, e.g. {missing[:3]}"
