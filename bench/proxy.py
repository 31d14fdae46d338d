"""Official-SDK producer vs mqclient: `python -m bench.proxy [--messages N] [--size BYTES]`.

Starts a name server and one ASYNC_FLUSH broker (real processes on loopback, bench.e2e's
cluster), then sends N messages one at a time (sync, 1 KiB by default) with the official
RocketMQ 5 Python SDK (rocketmq-python-client, in its own virtualenv: tests/proxy/
sdk_venv.py) through the broker's v2 endpoint, and N with mqclient's sync send, in the same
run. Client and broker share this machine's cores. The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import grpc

from bench.e2e import cluster
from mqclient import Message, Producer
from mqproto import admin_pb2, admin_pb2_grpc, namesrv_pb2, namesrv_pb2_grpc
from tests.proxy.sdk_venv import SDK_VERSION, run_sdk_client, sdk_python

TOPIC = "BenchV2"
QUEUES = 8


def v2_endpoint(namesrv: str) -> str:
    """The broker's v2 address, from its runtime table (once it registered)."""
    with grpc.insecure_channel(namesrv) as channel:
        info = namesrv_pb2_grpc.NamesrvServiceStub(channel).GetClusterInfo(
            namesrv_pb2.GetClusterInfoRequest(), timeout=10)
    broker_addr = next(iter(info.cluster_info.broker_addr_table.values())).broker_addrs[0]
    with grpc.insecure_channel(broker_addr) as channel:
        table = admin_pb2_grpc.AdminServiceStub(channel).GetRuntimeInfo(
            admin_pb2.GetRuntimeInfoRequest(), timeout=10).table
    return table["grpcProxyAddr"]


def bench_sdk(python: Path, endpoint: str, n: int, size: int, home: Path) -> float:
    result, lines = run_sdk_client(python, home, ["bench", endpoint, TOPIC, str(n), str(size)],
                                   timeout=600)
    if result.returncode != 0 or not lines:
        raise SystemExit(f"the SDK bench failed:\n{result.stdout}\n{result.stderr[-2000:]}")
    return n / lines[-1]["seconds"]


def bench_mqclient(namesrv: str, n: int, size: int) -> float:
    body = os.urandom(size)
    with Producer("BenchV2Producer", namesrv) as producer:
        producer.send(Message(TOPIC, body), timeout_s=30)  # warm-up: route and connection
        started = time.perf_counter()
        for _ in range(n):
            producer.send(Message(TOPIC, body))
        return n / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=3000)
    parser.add_argument("--size", type=int, default=1024, help="body bytes")
    args = parser.parse_args()
    python = sdk_python()
    with tempfile.TemporaryDirectory(prefix="bench-proxy-") as tmp:
        work = Path(tmp)
        with cluster(work, {"defaultTopicQueueNums": str(QUEUES)}) as namesrv:
            with Producer("BenchV2Create", namesrv) as producer:
                # Auto-created with 8 queues (a long timeout: the broker may be just up).
                producer.send(Message(TOPIC, b"create"), timeout_s=30)
            endpoint = v2_endpoint(namesrv)
            sdk_rate = bench_sdk(python, endpoint, args.messages, args.size, work)
            print(f"official SDK {SDK_VERSION} sync sends via v2: {sdk_rate:,.0f} msgs/s",
                  flush=True)
            mq_rate = bench_mqclient(namesrv, args.messages, args.size)
            print(f"mqclient sync sends: {mq_rate:,.0f} msgs/s", flush=True)
    print(json.dumps({"messages": args.messages, "body_bytes": args.size,
                      "sdk_version": SDK_VERSION, "sdk_sync_msgs_s": round(sdk_rate, 1),
                      "mqclient_sync_msgs_s": round(mq_rate, 1)}))


if __name__ == "__main__":
    main()
