"""A consumer in its own process, for tests that kill it:
`python -m tests.mqclient.consumer_child NAMESRV TOPIC GROUP`. Prints "started" once it
consumes, then runs until killed."""

from __future__ import annotations

import sys
import time

from mqclient import PushConsumer, consume_all


def main() -> None:
    namesrv, topic, group = sys.argv[1:4]
    consumer = PushConsumer(group, namesrv).subscribe(topic)
    consumer.register_listener_concurrently(consume_all).start()
    print("started", consumer.client_id, flush=True)
    while True:
        time.sleep(1)


if __name__ == "__main__":
    main()
