"""Runs the official RocketMQ 5 Python SDK (rocketmq-python-client, unmodified) against a
broker's v2 endpoint; started by the tests with the SDK's own virtualenv's python (its
generated `apache.rocketmq.v2` modules clash with ours in one process).

    python sdk_client.py send ENDPOINT TOPIC MESSAGES_JSON
    python sdk_client.py receive ENDPOINT TOPIC GROUP OPTIONS_JSON
    python sdk_client.py push ENDPOINT TOPIC GROUP OPTIONS_JSON
    python sdk_client.py txn ENDPOINT TOPIC OPTIONS_JSON
    python sdk_client.py bench ENDPOINT TOPIC COUNT BODY_SIZE

Prints one JSON object per line: a send result or error per message, a received message,
and finally {"done": ...}. Imports nothing of this repository.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from typing import Any

from rocketmq import (
    ClientConfiguration,
    ConsumeResult,
    Credentials,
    FilterExpression,
    Message,
    MessageListener,
    Producer,
    PushConsumer,
    SimpleConsumer,
    TransactionChecker,
)
from rocketmq.grpc_protocol import FilterType, TransactionResolution


def out(obj: dict[str, Any]) -> None:
    print(json.dumps(obj), flush=True)


def error_of(e: Exception) -> dict[str, Any]:
    return {"error": type(e).__name__, "code": getattr(e, "code", None), "message": str(e)}


# MQ_SDK_TLS=1: the SDK's clients connect with TLS (the CA: $GRPC_DEFAULT_SSL_ROOTS_FILE_PATH).
TLS = os.environ.get("MQ_SDK_TLS") == "1"


def config(endpoint: str) -> ClientConfiguration:
    return ClientConfiguration(endpoint, Credentials(), request_timeout=5)


def send(endpoint: str, topic: str, specs: list[dict[str, Any]]) -> None:
    producer = Producer(config(endpoint), (topic,), tls_enable=TLS)
    producer.startup()
    try:
        for spec in specs:
            m = Message()
            m.topic = spec.get("topic", topic)
            m.body = spec["body"].encode()
            if spec.get("tag"):
                m.tag = spec["tag"]
            for key in spec.get("keys", ()):
                m.keys = key  # the SDK's setter adds one key
            for name, value in spec.get("props", {}).items():
                m.add_property(name, value)
            if spec.get("group"):
                m.message_group = spec["group"]
            if spec.get("delay_s"):
                m.delivery_timestamp = int(time.time()) + spec["delay_s"]
            try:
                receipt = producer.send(m)
                out({"id": receipt.message_id, "offset": receipt.offset,
                     "body": spec["body"], "sent_at_ms": int(time.time() * 1000)})
            except Exception as e:
                out({"body": spec["body"], **error_of(e)})
    finally:
        producer.shutdown()
    out({"done": "send"})


def message_json(m: Any) -> dict[str, Any]:
    return {"id": m.message_id, "body": m.body.decode(), "tag": m.tag,
            "keys": sorted(m.keys), "props": dict(m.properties), "attempt": m.delivery_attempt,
            "group": m.message_group, "delivery_ts": m.delivery_timestamp,
            "received_at_ms": int(time.time() * 1000), "topic": m.topic}


def receive(endpoint: str, topic: str, group: str, opts: dict[str, Any]) -> None:
    """Receives until `count` messages came or `timeout_s` passed. ack: "all" | "none";
    change_s: change each message's invisible duration to that (not acked)."""
    count, timeout_s = opts["count"], opts.get("timeout_s", 30)
    invisible_s = opts.get("invisible_s", 10)
    if opts.get("sql"):
        expression = FilterExpression(opts["sql"], FilterType.SQL)
    elif opts.get("tag"):
        expression = FilterExpression(opts["tag"])
    else:
        expression = FilterExpression()
    consumer = SimpleConsumer(config(endpoint), group, {topic: expression},
                              await_duration=opts.get("await_s", 2), tls_enable=TLS)
    consumer.startup()
    got = 0
    calls = opts.get("calls", 1 << 30)  # at most this many receive calls
    deadline = time.monotonic() + timeout_s
    try:
        while got < count and time.monotonic() < deadline and calls > 0:
            calls -= 1
            try:
                msgs = consumer.receive(opts.get("batch", 16), invisible_s)
            except Exception as e:
                out(error_of(e))
                time.sleep(0.2)
                continue
            for m in msgs:
                if got >= count:
                    break  # left in flight: delivered again after its invisible duration
                got += 1
                record = message_json(m)
                if opts.get("change_s") is not None:
                    consumer.change_invisible_duration(m, opts["change_s"])
                    record["changed"] = True
                if opts.get("ack") == "all":
                    consumer.ack(m)
                    record["acked"] = True
                out(record)
    finally:
        consumer.shutdown()
    out({"done": "receive", "count": got})


class Listener(MessageListener):
    """Consumes; the bodies in `fail` fail their first `fail_times` deliveries."""

    def __init__(self, fail: set[str], fail_times: int) -> None:
        self.fail = fail
        self.fail_times = fail_times
        self.lock = threading.Lock()
        self.done: set[str] = set()

    def consume(self, message: Any) -> Any:
        record = message_json(message)
        body = record["body"]
        ok = body not in self.fail or (message.delivery_attempt or 1) > self.fail_times
        record["result"] = "SUCCESS" if ok else "FAILURE"
        with self.lock:
            out(record)
            if ok:
                self.done.add(body)
        return ConsumeResult.SUCCESS if ok else ConsumeResult.FAILURE


def push(endpoint: str, topic: str, group: str, opts: dict[str, Any]) -> None:
    """A PushConsumer until `count` distinct bodies were consumed or `timeout_s` passed."""
    listener = Listener(set(opts.get("fail", ())), opts.get("fail_times", 1))
    consumer = PushConsumer(config(endpoint), group, listener, {topic: FilterExpression()},
                            consumption_thread_count=4)
    consumer.startup()
    deadline = time.monotonic() + opts.get("timeout_s", 60)
    try:
        while time.monotonic() < deadline:
            with listener.lock:
                if len(listener.done) >= opts["count"]:
                    break
            time.sleep(0.1)
        time.sleep(opts.get("linger_s", 0.5))  # acks on their way
    finally:
        consumer.shutdown()
    out({"done": "push", "count": len(listener.done)})


class Checker(TransactionChecker):
    """Answers the broker's checks of orphaned halves with `answer`, printing each."""

    def __init__(self, answer: str) -> None:
        self.answer = answer

    def check(self, message: Any) -> Any:
        out({"checked": message.body.decode(), "id": message.message_id,
             "answer": self.answer})
        return (TransactionResolution.COMMIT if self.answer == "commit"
                else TransactionResolution.ROLLBACK)


def txn(endpoint: str, topic: str, opts: dict[str, Any]) -> None:
    """Transactional sends: each body's half, then `end` (commit | rollback | none: left to
    the broker's check, answered `checker`); stays `linger_s` for checks."""
    producer = Producer(config(endpoint), (topic,), checker=Checker(opts.get("checker",
                                                                             "rollback")))
    producer.startup()
    try:
        for body in opts["bodies"]:
            transaction = producer.begin_transaction()
            m = Message()
            m.topic = topic
            m.body = body.encode()
            receipt = producer.send(m, transaction)
            out({"id": receipt.message_id, "body": body, "transaction_id":
                 receipt.transaction_id})
            if opts.get("end") == "commit":
                transaction.commit()
            elif opts.get("end") == "rollback":
                transaction.rollback()
        time.sleep(opts.get("linger_s", 0))
    finally:
        producer.shutdown()
    out({"done": "txn"})


def bench(endpoint: str, topic: str, count: int, size: int) -> None:
    producer = Producer(config(endpoint), (topic,))
    producer.startup()
    body = b"x" * size
    try:
        m = Message()
        m.topic = topic
        m.body = body
        producer.send(m)  # warm-up: route and channel
        started = time.perf_counter()
        for _ in range(count):
            m = Message()
            m.topic = topic
            m.body = body
            producer.send(m)
        elapsed = time.perf_counter() - started
    finally:
        producer.shutdown()
    out({"done": "bench", "count": count, "seconds": elapsed})


def main(argv: list[str]) -> int:
    command = argv[0]
    if command == "send":
        send(argv[1], argv[2], json.loads(argv[3]))
    elif command == "receive":
        receive(argv[1], argv[2], argv[3], json.loads(argv[4]))
    elif command == "push":
        push(argv[1], argv[2], argv[3], json.loads(argv[4]))
    elif command == "txn":
        txn(argv[1], argv[2], json.loads(argv[3]))
    elif command == "bench":
        bench(argv[1], argv[2], int(argv[3]), int(argv[4]))
    else:
        print(f"unknown command {command}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
