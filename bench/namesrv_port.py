"""What the name server's shared port costs gRPC clients: `python -m bench.namesrv_port
[--calls N] [--concurrency C]`.

Starts two name server processes on loopback, one serving gRPC and RocketMQ 4.x remoting
on its port (the default: gRPC connections spliced to an internal gRPC port) and one with
`--no-remoting` (gRPC on the port itself), registers a broker with 100 topics on each, then
makes N GetRouteInfoByTopic calls on one channel, one at a time (latency) and C at a time
(throughput), against each, and reads each process's CPU time for the calls. The last line
is one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import grpc

from mqproto import common_pb2, namesrv_pb2, namesrv_pb2_grpc

TOPICS = 100


def start_namesrv(args: list[str], log: Path) -> tuple[subprocess.Popen[str], str]:
    process = subprocess.Popen([sys.executable, "-m", "nameserver", "--listen",
                                "127.0.0.1:0", "--log-level", "WARNING", *args],
                               stdout=subprocess.PIPE, stderr=log.open("w"), text=True)
    assert process.stdout is not None
    line = process.stdout.readline()
    return process, line.strip().rpartition("listen=")[2]


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def run(address: str, calls: int, concurrency: int) -> dict[str, float]:
    async with grpc.aio.insecure_channel(address) as channel:
        stub = namesrv_pb2_grpc.NamesrvServiceStub(channel)
        await stub.RegisterBroker(namesrv_pb2.RegisterBrokerRequest(
            cluster_name="C", broker_name="b", broker_addr="127.0.0.1:1", broker_id=0,
            data_version=common_pb2.DataVersion(timestamp=1, counter=1),
            topic_configs=[common_pb2.TopicConfig(topic_name=f"T{i}", read_queue_nums=8,
                                                  write_queue_nums=8, perm=6)
                           for i in range(TOPICS)]), timeout=10)
        for i in range(200):  # warm up
            await stub.GetRouteInfoByTopic(
                namesrv_pb2.GetRouteInfoByTopicRequest(topic=f"T{i % TOPICS}"), timeout=10)
        latencies = []
        for i in range(calls):
            started = time.perf_counter()
            await stub.GetRouteInfoByTopic(
                namesrv_pb2.GetRouteInfoByTopicRequest(topic=f"T{i % TOPICS}"), timeout=10)
            latencies.append(time.perf_counter() - started)
        latencies.sort()

        async def worker(n: int) -> None:
            for i in range(n):
                await stub.GetRouteInfoByTopic(
                    namesrv_pb2.GetRouteInfoByTopicRequest(topic=f"T{i % TOPICS}"),
                    timeout=10)
        started = time.perf_counter()
        await asyncio.gather(*(worker(calls // concurrency) for _ in range(concurrency)))
        elapsed = time.perf_counter() - started
    return {"p50_us": statistics.median(latencies) * 1e6,
            "p99_us": latencies[int(len(latencies) * 0.99)] * 1e6,
            "calls_per_s": (calls // concurrency) * concurrency / elapsed}


def main() -> None:
    parser = argparse.ArgumentParser(prog="bench.namesrv_port")
    parser.add_argument("--calls", type=int, default=5000)
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args()
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, extra in (("shared port (gRPC spliced)", []),
                            ("gRPC alone (--no-remoting)", ["--no-remoting"])):
            process, address = start_namesrv(extra, Path(tmp) / f"{len(results)}.log")
            try:
                before = cpu_s(process.pid)
                figures = asyncio.run(run(address, args.calls, args.concurrency))
                figures["namesrv_cpu_us_per_call"] = ((cpu_s(process.pid) - before)
                                                      / (2 * args.calls + 200) * 1e6)
            finally:
                process.terminate()
                process.wait(10)
            results[name] = figures
            print(f"{name:28s} p50 {figures['p50_us']:7.0f} us  p99 {figures['p99_us']:7.0f} us"
                  f"  {figures['calls_per_s']:7.0f} calls/s  name server CPU "
                  f"{figures['namesrv_cpu_us_per_call']:5.0f} us/call", flush=True)
    print(json.dumps(results))


if __name__ == "__main__":
    main()
