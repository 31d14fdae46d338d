"""A producer and a push consumer (mqclient) through a cluster: creates a topic on every
master, sends messages with keys (sync sends) and consumes them all with a new group.

Imported by the compose tests on the host, and run as a script in a container on the
compose network (it needs only mqclient and the standard library, which the image has):

    python roundtrip.py NAMESRV_ADDR TOPIC COUNT [--probe HOST:PORT ...]

waits until every master has a slave in sync, then prints one JSON object: the send
statuses and brokers used, what was consumed, the container's address as
broker.config.local_ip() sees it and, for each --probe address, whether a TCP connection
to it succeeds.
"""

from __future__ import annotations

import argparse
import json
import socket
import threading
import time
from collections import Counter
from typing import Any

from mqclient import ConsumeFromWhere, Message, MessageExt, Producer, PushConsumer
from mqclient.admin import AdminError, MQAdmin

CLUSTER = "DefaultCluster"
QUEUES = 4
ROUTE_TIMEOUT_S = 30.0
CONSUME_TIMEOUT_S = 60.0
IN_SYNC_TIMEOUT_S = 60.0


def create_topic(namesrv: str, topic: str, groups: int) -> None:
    """The topic on every master, and in the name servers' routes of all `groups`."""
    with MQAdmin(namesrv) as admin:
        admin.create_topic(topic, cluster=CLUSTER, read_queue_nums=QUEUES,
                           write_queue_nums=QUEUES)
        deadline = time.monotonic() + ROUTE_TIMEOUT_S
        while True:
            try:
                if len(admin.topic_route(topic).broker_groups) >= groups:
                    return
            except AdminError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"no route of {topic} on {groups} groups after "
                                   f"{ROUTE_TIMEOUT_S:g} s")
            time.sleep(0.2)


def wait_for_slaves_in_sync(namesrv: str, groups: int = 2,
                            timeout: float = IN_SYNC_TIMEOUT_S) -> None:
    """Until `groups` masters each count a slave in sync: before that a SYNC_MASTER answers
    SLAVE_NOT_AVAILABLE by design (health checks say only that brokers are registered)."""
    deadline = time.monotonic() + timeout
    with MQAdmin(namesrv) as admin:
        while True:
            masters = [g.master_addr for g in admin.cluster_info().all_groups()
                       if g.master_addr is not None]
            in_sync = []
            for addr in masters:
                try:
                    in_sync.append(admin.ha_status(addr).in_sync_slave_nums > 0)
                except AdminError:
                    in_sync.append(False)
            if len(masters) >= groups and all(in_sync):
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"masters {masters}: slaves in sync {in_sync} after "
                                   f"{timeout:g} s")
            time.sleep(0.2)


def round_trip(namesrv: str, topic: str, count: int, groups: int = 2) -> dict[str, Any]:
    create_topic(namesrv, topic, groups)
    producer = Producer(f"{topic}-producer", namesrv).start()
    try:
        results = [producer.send(Message(topic, b"body-%d" % i, keys=[f"key-{i}"]))
                   for i in range(count)]
    finally:
        producer.shutdown()
    sent = {r.msg_id for r in results}

    received: Counter[bytes] = Counter()
    lock = threading.Lock()
    done = threading.Event()

    def listener(msgs: list[MessageExt]) -> None:
        with lock:
            received.update(m.body for m in msgs)
            if len(received) >= count:
                done.set()

    consumer = PushConsumer(f"{topic}-consumer", namesrv,
                            consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
    consumer.subscribe(topic, "*").register_listener_concurrently(listener)
    started = time.monotonic()
    consumer.start()
    try:
        done.wait(CONSUME_TIMEOUT_S)
        consume_s = time.monotonic() - started
    finally:
        consumer.shutdown()
    with lock:
        bodies = sorted(b.decode() for b in received)
    return {
        "statuses": dict(Counter(r.status.value for r in results)),
        "brokers": dict(Counter(r.message_queue.broker_name for r in results)),
        "distinct_msg_ids": len(sent),
        "received": bodies,
        "consume_s": round(consume_s, 2),
    }


def can_connect(address: str) -> bool:
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=5):
            return True
    except OSError:
        return False


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("namesrv")
    parser.add_argument("topic")
    parser.add_argument("count", type=int)
    parser.add_argument("--probe", action="append", default=[])
    args = parser.parse_args()
    from broker.config import local_ip

    wait_for_slaves_in_sync(args.namesrv)
    result = round_trip(args.namesrv, args.topic, args.count)
    result["local_ip"] = local_ip()
    result["probes"] = {a: can_connect(a) for a in args.probe}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
