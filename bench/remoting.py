"""RocketMQ 4.x remoting vs our own protocol, broker CPU per message: `python -m
bench.remoting [--messages N] [--size BYTES]`.

Starts a name server and one ASYNC_FLUSH broker (real processes on loopback, bench.e2e's
cluster), then, in the same run, sends N messages (1 KiB by default) with the unmodified
Apache C++ client (PyPI rocketmq 0.4.4 in its own virtualenv: tests/remoting4x/cpp_venv.py)
over the broker's remoting port, sync and async, and N with mqclient, sync (gRPC
SendMessage) and async (batched on the send channel). For each: the rate and the broker's
CPU microseconds per message (client and broker share this machine's cores), less what the
broker spends idle over the same time (its store's threads poll: a slower run would be
charged more of it), measured for 3 s before. The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

from bench.e2e import CpuMeter, cluster_processes
from mqclient import Message, Producer
from tests.remoting4x.cpp_venv import CPP_VERSION, cpp_python, finish, start_cpp_client

TOPIC = "BenchRemoting"
QUEUES = 8


IDLE_S = 3.0


class NetMeter:
    """Broker CPU per message, less its idle CPU rate over the phase's wall time."""

    def __init__(self, meter: CpuMeter) -> None:
        self.meter = meter
        meter.start()
        time.sleep(IDLE_S)
        self.idle_us_per_s, _ = meter.per_message_us(1)
        self.idle_us_per_s /= IDLE_S
        self.started = 0.0

    def start(self) -> None:
        self.meter.start()
        self.started = time.perf_counter()

    def per_message_us(self, n: int) -> tuple[float, float]:
        total, client = self.meter.per_message_us(n)
        idle = self.idle_us_per_s * (time.perf_counter() - self.started) / n
        return total - idle, client


def bench_cpp(python: Path, namesrv: str, n: int, size: int, mode: str, home: Path,
              meter: NetMeter) -> tuple[float, float]:
    meter.start()
    process = start_cpp_client(python, home / mode, ["bench", namesrv, TOPIC, str(n),
                                                     str(size), mode])
    code, lines, err = finish(process, 900)
    broker_us, _ = meter.per_message_us(n)
    if code != 0 or not lines or lines[0].get("failed"):
        raise SystemExit(f"the C++ client's bench failed ({code}):\n{lines}\n{err}")
    return n / lines[0]["seconds"], broker_us


def bench_mqclient(namesrv: str, n: int, size: int, mode: str, meter: NetMeter
                   ) -> tuple[float, float]:
    body = os.urandom(size)
    with Producer("BenchRemotingMq", namesrv) as producer:
        producer.send(Message(TOPIC, body), timeout_s=30)  # warm-up: route and connection
        meter.start()
        started = time.perf_counter()
        if mode == "sync":
            for _ in range(n):
                producer.send(Message(TOPIC, body))
        else:
            futures = [producer.send_async(Message(TOPIC, body)) for _ in range(n)]
            for f in futures:
                f.result(timeout=120)
        rate = n / (time.perf_counter() - started)
        broker_us, _ = meter.per_message_us(n)
    return rate, broker_us


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=5000)
    parser.add_argument("--size", type=int, default=1024, help="body bytes")
    args = parser.parse_args()
    python = cpp_python()
    results: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-remoting-") as tmp:
        work = Path(tmp)
        with cluster_processes(work, {"defaultTopicQueueNums": str(QUEUES)}) as (namesrv,
                                                                                 broker):
            with Producer("BenchRemotingCreate", namesrv) as producer:
                producer.send(Message(TOPIC, b"create"), timeout_s=30)
            meter = NetMeter(CpuMeter(broker.pid))
            print(f"broker idle: {meter.idle_us_per_s / 1e4:.1f}% of a core", flush=True)
            for name, run in (
                    ("cpp_sync", lambda: bench_cpp(python, namesrv, args.messages, args.size,
                                                   "sync", work, meter)),
                    ("mqclient_sync", lambda: bench_mqclient(namesrv, args.messages,
                                                             args.size, "sync", meter)),
                    ("cpp_async", lambda: bench_cpp(python, namesrv, args.messages,
                                                    args.size, "async", work, meter)),
                    ("mqclient_async", lambda: bench_mqclient(namesrv, args.messages,
                                                              args.size, "async", meter))):
                rate, broker_us = run()
                results[name] = {"msgs_s": round(rate, 1), "broker_cpu_us_per_msg":
                                 round(broker_us, 1)}
                print(f"{name:15s} {rate:9,.0f} msgs/s   broker CPU {broker_us:6.1f} us/msg",
                      flush=True)
    print(json.dumps({"messages": args.messages, "body_bytes": args.size,
                      "cpp_client": CPP_VERSION, **results}))


if __name__ == "__main__":
    main()
