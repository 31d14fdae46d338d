"""The send channel floor: what the channel's transport allows on this machine.

`python -m bench.channel_floor` serves the send channel's frames (remoting/framing.py) and
answers every SendBatch at once, storing nothing, with as many offsets as the broker would;
`measure()` drives it the way a producer's sync `send_batch` does (blocking connections,
`threads` threads), so `bench.e2e` can print how far the broker is from doing no work.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys

from bench.grpc_floor import READY_PREFIX, calls_per_second
from mqclient.message import Message
from mqclient.send_channel import BlockingSendConnections
from mqproto import common_pb2, messaging_pb2
from remoting.framing import KIND_SEND_BATCH, FrameReader, encode_frame

BATCH = 32


class NoWorkConnection(asyncio.BufferedProtocol):
    def __init__(self) -> None:
        self.reader = FrameReader()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.reader.get_buffer()

    def buffer_updated(self, nbytes: int) -> None:
        assert self.transport is not None
        for request_id, kind, _ in self.reader.received(nbytes):
            self.transport.write(encode_frame(request_id, kind, ANSWER))


ANSWER = messaging_pb2.SendBatchResponse(
    status=common_pb2.Status(code=common_pb2.SUCCESS), queue_id=0,
    first_queue_offset=1 << 20, commit_log_offsets=[(1 << 30) + i * 1200 for i in range(BATCH)],
    offset_msg_id_host="7F00000100002A9F").SerializeToString()


async def _serve() -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(NoWorkConnection, "127.0.0.1", 0)
    print(f"{READY_PREFIX}{server.sockets[0].getsockname()[1]}", flush=True)
    await server.serve_forever()


def measure(body: bytes, calls: int = 4000, threads: int = 2) -> dict[str, float]:
    """Runs the no-work server in a child process and measures it from this one."""
    server = subprocess.Popen([sys.executable, "-m", "bench.channel_floor"], text=True,
                              stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
    connections = BlockingSendConnections()
    try:
        assert server.stdout is not None
        line = server.stdout.readline()
        if not line.startswith(READY_PREFIX):
            raise SystemExit(f"send channel floor server did not start: {line!r}")
        address = f"127.0.0.1:{line[len(READY_PREFIX):].strip()}"
        msgs = [Message("BenchTopic", body) for _ in range(BATCH)]

        def send_batch() -> None:  # what Producer.send_batch does per call, minus routing
            encoded = b"".join(m.encode(f"{i:032X}") for i, m in enumerate(msgs))
            request = messaging_pb2.SendBatchRequest(
                producer_group="P", topic="BenchTopic", encoded_messages=encoded)
            messaging_pb2.SendBatchResponse.FromString(connections.request(
                address, KIND_SEND_BATCH, request.SerializeToString(), 10.0))

        send_batch()  # connect
        rate = calls_per_second(send_batch, calls, threads)
        return {"floor_channel_batch32_msgs_s": rate * BATCH}
    finally:
        connections.close()
        server.kill()
        server.wait()


if __name__ == "__main__":
    asyncio.run(_serve())
