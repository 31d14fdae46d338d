"""Message trace benchmark: `python -m bench.trace [--messages N] [--rounds R]`.

Starts a name server and one broker with traceTopicEnable (real processes on loopback),
then sends 1 KiB messages with async sends from two producers in turns: one without
trace and one with `enable_msg_trace` (a Pub record per send, written to
RMQ_SYS_TRACE_TOPIC by its background dispatcher), ROUNDS times, each turn to a topic of
its own. A turn's time ends when every send's future is done; the traced producer's trace
messages are flushed after it, untimed (so the next turn does not share the broker with
them). Reports both rates (medians), the ratio (median of the per-round ratios), the
trace messages written and the records dropped. Goal (issue 35): traced >= 0.9 of
untraced. The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from bench.e2e import cluster_processes, process_cpu_s
from mqclient import Message, Producer
from mqclient.admin import MQAdmin

BODY = os.urandom(1024)


def send_async(producer: Producer, topic: str, n: int) -> float:
    started = time.perf_counter()
    futures = [producer.send_async(Message(topic, BODY, keys=[f"k{i}"])) for i in range(n)]
    for f in futures:
        f.result(timeout=120)
    return n / (time.perf_counter() - started)


def run(messages: int, rounds: int) -> dict[str, float]:
    rates: dict[str, list[float]] = {"off": [], "on": []}
    cpu: dict[str, list[tuple[float, float]]] = {"off": [], "on": []}  # client, broker us
    with tempfile.TemporaryDirectory(prefix="bench-trace-") as tmp, \
            cluster_processes(Path(tmp), {"traceTopicEnable": "true"}) as (namesrv, broker):
        producers = {
            "off": Producer("PG-off", namesrv, send_timeout_s=60).start(),
            "on": Producer("PG-on", namesrv, send_timeout_s=60, enable_msg_trace=True).start(),
        }
        traced = producers["on"].trace
        assert traced is not None
        for mode, producer in producers.items():  # warm-up: routes, connections
            send_async(producer, f"Warm-{mode}", 2000)
        traced.flush()
        for r in range(rounds):
            for mode in (("off", "on") if r % 2 == 0 else ("on", "off")):
                topic = f"Bench-{mode}-{r}"
                producers[mode].send(Message(topic, b"create"))
                client0, broker0 = time.process_time(), process_cpu_s(broker.pid)
                rates[mode].append(send_async(producers[mode], topic, messages))
                traced.flush()  # the trace's whole cost counts, sent after the turn or not
                cpu[mode].append(((time.process_time() - client0) * 1e6 / messages,
                                  (process_cpu_s(broker.pid) - broker0) * 1e6 / messages))
        with MQAdmin(namesrv) as admin:  # the trace of one message is there
            sample = producers["on"].send(Message("Sample", b"x"))
            traced.flush()
            deadline = time.monotonic() + 30
            while not admin.query_msg_trace_by_id(sample.msg_id):
                if time.monotonic() > deadline:
                    raise SystemExit("no trace of the sample message")
                time.sleep(0.1)
        out = {"messages_per_turn": messages, "rounds": rounds,
               "trace_off_send_msgs_s": statistics.median(rates["off"]),
               "trace_on_send_msgs_s": statistics.median(rates["on"]),
               "trace_on_ratio": statistics.median(
                   a / b for a, b in zip(rates["on"], rates["off"], strict=True)),
               "trace_off_client_cpu_us": statistics.median(c for c, _ in cpu["off"]),
               "trace_on_client_cpu_us": statistics.median(c for c, _ in cpu["on"]),
               "trace_off_broker_cpu_us": statistics.median(b for _, b in cpu["off"]),
               "trace_on_broker_cpu_us": statistics.median(b for _, b in cpu["on"]),
               "trace_messages_sent": traced.sent, "trace_records_dropped": traced.dropped,
               "trace_messages_failed": traced.failed}
        for producer in producers.values():
            producer.shutdown()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=20_000, help="messages per turn")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    out = run(args.messages, args.rounds)
    print(f"async sends, trace off: {out['trace_off_send_msgs_s']:8.0f} msg/s")
    print(f"async sends, trace on:  {out['trace_on_send_msgs_s']:8.0f} msg/s  "
          f"ratio {out['trace_on_ratio']:.3f} (goal >= 0.9); "
          f"{out['trace_messages_sent']} trace messages, "
          f"{out['trace_records_dropped']} records dropped")
    print("CPU us per message (client, broker): off "
          f"{out['trace_off_client_cpu_us']:.1f}, {out['trace_off_broker_cpu_us']:.1f}; on "
          f"{out['trace_on_client_cpu_us']:.1f}, {out['trace_on_broker_cpu_us']:.1f}")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
