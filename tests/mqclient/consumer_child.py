"""A consumer in its own process, for tests that kill or stop it:
`python -m tests.mqclient.consumer_child NAMESRV TOPIC GROUP [options]`. Prints "started"
once it consumes, then runs until killed; with --log, SIGTERM shuts the consumer down
gracefully and prints "stopped SECONDS" (the time shutdown() took) before exiting."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time

from mqclient import ConsumeFromWhere, ConsumeStatus, MessageExt, PushConsumer, consume_all


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("namesrv")
    parser.add_argument("topic")
    parser.add_argument("group")
    parser.add_argument("--sleep", type=float, default=0.0, help="seconds per listener call")
    parser.add_argument("--log", help="append each finished message's body to this file")
    parser.add_argument("--shutdown-timeout", type=float, default=None)
    parser.add_argument("--first", action="store_true", help="CONSUME_FROM_FIRST_OFFSET")
    args = parser.parse_args()
    kw: dict[str, object] = {}
    if args.shutdown_timeout is not None:
        kw["shutdown_timeout_s"] = args.shutdown_timeout
    if args.first:
        kw["consume_from_where"] = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
    consumer = PushConsumer(args.group, args.namesrv, **kw).subscribe(args.topic)  # type: ignore[arg-type]
    listener = consume_all
    if args.log:
        log = open(args.log, "a", buffering=1)  # noqa: SIM115 (closed at exit)
        lock = threading.Lock()

        def listener(msgs: list[MessageExt]) -> ConsumeStatus:  # type: ignore[misc]
            time.sleep(args.sleep)
            with lock:
                for m in msgs:
                    log.write(m.body.decode() + "\n")
            return ConsumeStatus.CONSUME_SUCCESS

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    consumer.register_listener_concurrently(listener).start()
    print("started", consumer.client_id, flush=True)
    while not stop.wait(0.2):
        pass
    started = time.monotonic()
    consumer.shutdown()
    print(f"stopped {time.monotonic() - started:.2f}", flush=True)
    sys.exit(0)


if __name__ == "__main__":
    main()
