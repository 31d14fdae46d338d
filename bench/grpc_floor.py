"""The gRPC floor: what grpcio itself allows on this machine, measured beside our figures.

`python -m bench.grpc_floor` serves the messaging service with handlers that store nothing
and answer at once (a SendBatch answer has one result entry per message, as the broker's);
`measure()` drives it with the same stubs and thread counts the end-to-end bench uses, so
`bench.e2e` can print how far the broker is from a broker that does no work at all.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import grpc

from mqproto import common_pb2, messaging_pb2, messaging_pb2_grpc

READY_PREFIX = "grpc floor listening on port "


class NoWorkServicer(messaging_pb2_grpc.MessagingServiceServicer):
    async def SendMessage(self, request: Any, context: Any) -> Any:
        return messaging_pb2.SendMessageResponse(
            status=common_pb2.Status(code=common_pb2.SUCCESS),
            result=messaging_pb2.SendResultEntry(message_id="0" * 32, offset_msg_id="0" * 32))

    async def SendBatch(self, request: Any, context: Any) -> Any:
        return messaging_pb2.SendBatchResponse(
            status=common_pb2.Status(code=common_pb2.SUCCESS),
            results=[messaging_pb2.SendResultEntry(message_id="0" * 32, offset_msg_id="0" * 32,
                                                   queue_offset=i)
                     for i in range(len(request.messages))])


async def _serve() -> None:
    server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
    messaging_pb2_grpc.add_MessagingServiceServicer_to_server(NoWorkServicer(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    print(f"{READY_PREFIX}{port}", flush=True)
    await server.wait_for_termination()


def calls_per_second(call: Callable[[], Any], calls: int, threads: int) -> float:
    """Calls per second with `threads` threads making `calls` calls in all."""
    each = max(1, calls // threads)

    def run() -> None:
        for _ in range(each):
            call()

    workers = [threading.Thread(target=run) for _ in range(threads)]
    started = time.perf_counter()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return each * threads / (time.perf_counter() - started)


def measure(body: bytes, calls: int = 2000, batch_threads: int = 2) -> dict[str, float]:
    """Runs the no-work server in a child process and measures it from this one."""
    server = subprocess.Popen([sys.executable, "-m", "bench.grpc_floor"], text=True,
                              stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
    try:
        assert server.stdout is not None
        line = server.stdout.readline()
        if not line.startswith(READY_PREFIX):
            raise SystemExit(f"grpc floor server did not start: {line!r}")
        with grpc.insecure_channel(f"127.0.0.1:{line[len(READY_PREFIX):].strip()}") as channel:
            stub = messaging_pb2_grpc.MessagingServiceStub(channel)
            one = messaging_pb2.SendMessageRequest(
                message=messaging_pb2.Message(topic="BenchTopic", body=body))
            batch = messaging_pb2.SendBatchRequest(topic="BenchTopic", messages=[
                messaging_pb2.Message(topic="BenchTopic", body=body) for _ in range(32)])
            stub.SendMessage(one)  # connect
            unary = calls_per_second(lambda: stub.SendMessage(one), calls, 1)
            batches = calls_per_second(lambda: stub.SendBatch(batch), calls // 2, batch_threads)
        return {"floor_unary_calls_s": unary, "floor_batch32_msgs_s": batches * 32}
    finally:
        server.kill()
        server.wait()


if __name__ == "__main__":
    asyncio.run(_serve())
