"""Run by the C++ client's python (cpp_venv.py), never imported by the tests:

    cpp_client.py send NAMESRV TOPIC SPECS_JSON [OPTS_JSON]
    cpp_client.py push NAMESRV TOPIC GROUP OPTS_JSON
    cpp_client.py pull NAMESRV TOPIC GROUP EXPRESSION
    cpp_client.py bench NAMESRV TOPIC N SIZE sync|async   (bench/remoting.py)
    cpp_client.py stream NAMESRV TOPIC N INTERVAL_S

send: each spec {body, keys, tags, props: {name: value}, delay, mode: sync | oneway |
orderly (with `key`), batch: [specs]}; prints {"status", "msg_id", "offset"} per send, or
{"error"}. OPTS: {credentials: [access key, secret key]} (ACL).
push: a push consumer (opts: expression, orderly, broadcast, expect, timeout_s, settle_s,
props: names to read, fail_first: bodies whose first delivery fails); prints one line per
message delivered, then {"done": true} once `expect` arrived and `settle_s` passed (or
timeout_s), credentials as for send.
pull: a pull consumer reading every queue of the topic from offset 0 to its end.
stream: N sync sends of bodies "m0".."m{N-1}", one every INTERVAL_S, a line each ({"body",
"status", "msg_id"} or {"body", "error"}): what was acknowledged while a broker fails.
Prints JSON lines only, flushed at once.
"""

import json
import sys
import threading
import time

from rocketmq.client import Message, Producer, PullConsumer, PushConsumer, RecvMessage
from rocketmq.exceptions import ffi_check
from rocketmq.ffi import MessageModel, _CConsumeStatus, dll


def out(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def message(topic, spec):
    msg = Message(topic)
    msg.set_body(spec["body"].encode("utf-8"))
    if spec.get("keys"):
        msg.set_keys(spec["keys"])
    if spec.get("tags"):
        msg.set_tags(spec["tags"])
    for name, value in (spec.get("props") or {}).items():
        msg.set_property(name, value)
    if spec.get("delay"):
        msg.set_delay_time_level(spec["delay"])
    return msg


def send(namesrv, topic, specs, opts):
    producer = Producer("PID_CPP_TEST", timeout=5000)
    producer.set_namesrv_addr(namesrv)
    if opts.get("credentials"):
        producer.set_session_credentials(*opts["credentials"], "")
    producer.start()
    try:
        for spec in specs:
            try:
                mode = spec.get("mode", "sync")
                if spec.get("batch"):
                    r = producer.send_batch([message(topic, s) for s in spec["batch"]])
                elif mode == "oneway":
                    producer.send_oneway(message(topic, spec))
                    out({"status": "ONEWAY"})
                    continue
                elif mode == "orderly":
                    r = producer.send_orderly(message(topic, spec), spec["key"])
                else:
                    r = producer.send_sync(message(topic, spec))
                out({"status": r.status.name, "msg_id": r.msg_id, "offset": r.offset})
            except Exception as e:  # the client's error text, for the test to show
                out({"error": f"{type(e).__name__}: {e}"})
    finally:
        producer.shutdown()
    out({"done": True})


def push(namesrv, topic, group, opts):
    model = MessageModel.BROADCASTING if opts.get("broadcast") else MessageModel.CLUSTERING
    consumer = PushConsumer(group, orderly=bool(opts.get("orderly")), message_model=model)
    consumer.set_namesrv_addr(namesrv)
    if opts.get("credentials"):
        consumer.set_session_credentials(*opts["credentials"], "")
    consumer.set_thread_count(int(opts.get("threads", 2)))
    lock = threading.Lock()
    seen = {"n": 0, "last": time.monotonic()}
    failed = set()
    fail_first = set(opts.get("fail_first") or [])

    def on_message(consumer_handle, msg_handle):
        """The library's callback, returning its status itself: the wrapper's subscribe()
        turns an exception into CONSUME_SUCCESS (it re-raises inside the ctypes callback,
        whose return value is then 0), so a failed consumption is returned here."""
        msg = RecvMessage(msg_handle)
        body = (msg.body or b"").decode("utf-8", "replace")
        if body in fail_first and body not in failed:
            failed.add(body)
            return _CConsumeStatus.RECONSUME_LATER.value
        props = {name: (msg.get_property(name) or b"").decode() for name in
                 opts.get("props") or []}
        with lock:
            seen["n"] += 1
            seen["last"] = time.monotonic()
            out({"body": body, "id": msg.id, "tags": (msg.tags or b"").decode(),
                 "keys": (msg.keys or b"").decode(), "queue_id": msg.queue_id,
                 "queue_offset": msg.queue_offset, "reconsume": msg.reconsume_times,
                 "topic": msg.topic, "props": props,
                 "store_ts": msg.store_timestamp, "born_ts": msg.born_timestamp})
        return _CConsumeStatus.CONSUME_SUCCESS.value

    ffi_check(dll.Subscribe(consumer._handle, topic.encode(),
                            opts.get("expression", "*").encode()))
    consumer._register_callback(on_message)
    consumer.start()
    out({"started": True})
    deadline = time.monotonic() + float(opts.get("timeout_s", 60))
    expect = int(opts.get("expect", 0))
    settle = float(opts.get("settle_s", 1))
    while time.monotonic() < deadline:
        with lock:
            if seen["n"] >= expect and time.monotonic() - seen["last"] >= settle:
                break
        time.sleep(0.05)
    consumer.shutdown()
    out({"done": True, "received": seen["n"]})


def pull(namesrv, topic, group, expression):
    consumer = PullConsumer(group)
    consumer.set_namesrv_addr(namesrv)
    consumer.start()
    try:
        for msg in consumer.pull(topic, expression):
            out({"body": (msg.body or b"").decode("utf-8", "replace"),
                 "tags": (msg.tags or b"").decode(), "queue_id": msg.queue_id,
                 "queue_offset": msg.queue_offset})
    finally:
        consumer.shutdown()
    out({"done": True})


def bench(namesrv, topic, n, size, mode):
    producer = Producer("PID_CPP_BENCH", timeout=10000)
    producer.set_namesrv_addr(namesrv)
    producer.start()
    body = ("x" * size).encode()

    def msg():
        m = Message(topic)
        m.set_body(body)
        return m

    producer.send_sync(msg())  # route and connection
    done = threading.Semaphore(0)
    failed = []
    started = time.perf_counter()
    if mode == "sync":
        for _ in range(n):
            producer.send_sync(msg())
    else:
        window = threading.Semaphore(1000)  # in flight at most

        def ok(_result):
            window.release()
            done.release()

        def error(e):
            failed.append(str(e))
            window.release()
            done.release()

        for _ in range(n):
            window.acquire()
            producer.send_async(msg(), ok, error)
        for _ in range(n):
            done.acquire()
    seconds = time.perf_counter() - started
    producer.shutdown()
    out({"seconds": seconds, "failed": len(failed)})
    out({"done": True})


def stream(namesrv, topic, n, interval_s):
    producer = Producer("PID_CPP_STREAM", timeout=3000)
    producer.set_namesrv_addr(namesrv)
    producer.start()
    try:
        for i in range(n):
            body = f"m{i}"
            msg = Message(topic)
            msg.set_body(body.encode())
            try:
                r = producer.send_sync(msg)
                out({"body": body, "status": r.status.name, "msg_id": r.msg_id})
            except Exception as e:
                out({"body": body, "error": f"{type(e).__name__}: {e}"[:200]})
            time.sleep(interval_s)
    finally:
        producer.shutdown()
    out({"done": True})


def main():
    command = sys.argv[1]
    if command == "send":
        send(sys.argv[2], sys.argv[3], json.loads(sys.argv[4]),
             json.loads(sys.argv[5]) if len(sys.argv) > 5 else {})
    elif command == "push":
        push(sys.argv[2], sys.argv[3], sys.argv[4], json.loads(sys.argv[5]))
    elif command == "bench":
        bench(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), sys.argv[6])
    elif command == "stream":
        stream(sys.argv[2], sys.argv[3], int(sys.argv[4]), float(sys.argv[5]))
    elif command == "pull":
        pull(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5])
    else:
        raise SystemExit(f"unknown command {command}")


if __name__ == "__main__":
    main()
