"""One TCP port for gRPC and RocketMQ 4.x remoting: a front that reads a connection's first
four bytes and either serves it as remoting or splices it to a gRPC server on an internal
address.

Clients speak first in both protocols: an HTTP/2 connection opens with its preface
"PRI * HTTP/2.0", a TLS one with a handshake record (0x16 0x03 ...), a remoting one with
its frame length (a small big-endian int32: its first byte is 0 below 16 MiB). So a
connection whose first bytes are "PRI " or a TLS record goes to gRPC, byte for byte in
both directions; any other goes to the remoting server with those bytes handed over.

The gRPC server sees the front's loopback connection as its peer; one front connection is
one internal connection (so what the gRPC side tracks per connection still holds).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from remoting.connection import RemotingServer

log = logging.getLogger(__name__)

HTTP2_PREFACE_START = b"PRI "
TLS_HANDSHAKE = 0x16
SNIFF_TIMEOUT_S = 60.0  # a connection that says nothing this long is closed
PUMP_BYTES = 256 * 1024


def is_grpc_start(first: bytes) -> bool:
    """The first four bytes of an HTTP/2 (or TLS) connection, not of a remoting frame."""
    return first == HTTP2_PREFACE_START or (len(first) >= 2 and first[0] == TLS_HANDSHAKE
                                            and first[1] == 0x03)


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            data = await reader.read(PUMP_BYTES)
            if not data:
                break
            writer.write(data)
            if writer.transport.get_write_buffer_size() > PUMP_BYTES:
                await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (ConnectionError, OSError):
        writer.close()


class SharedPort:
    """Serves `remoting` and relays gRPC connections to `grpc_host:grpc_port`."""

    def __init__(self, remoting: RemotingServer, grpc_host: str, grpc_port: int) -> None:
        self.remoting = remoting
        self.grpc_host = grpc_host
        self.grpc_port = grpc_port
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.spliced = 0  # gRPC connections relayed so far

    async def start(self, host: str, port: int) -> int:
        self._server = await asyncio.start_server(self._accept, host, port, backlog=1024)
        return int(self._server.sockets[0].getsockname()[1])

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
                      ) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            try:
                first = await asyncio.wait_for(reader.readexactly(4), SNIFF_TIMEOUT_S)
            except (asyncio.IncompleteReadError, TimeoutError, ConnectionError, OSError):
                writer.close()
                return
            if is_grpc_start(first):
                await self._splice(first, reader, writer)
            else:
                await self.remoting.serve_stream(reader, writer, first)
        except asyncio.CancelledError:
            # stop(): the connection ends here (asyncio's stream server logs a handler
            # task that ends cancelled as an error)
            writer.close()
        finally:
            self._tasks.discard(task)

    async def _splice(self, first: bytes, reader: asyncio.StreamReader,
                      writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.wait_for(
                asyncio.open_connection(self.grpc_host, self.grpc_port), 5)
        except (OSError, TimeoutError) as e:
            log.warning("cannot relay a gRPC connection to %s:%d: %s", self.grpc_host,
                        self.grpc_port, e)
            writer.close()
            return
        self.spliced += 1
        up_writer.write(first)
        try:
            await asyncio.gather(_pump(reader, up_writer), _pump(up_reader, writer))
        finally:
            for w in (writer, up_writer):
                w.close()
                with contextlib.suppress(Exception):
                    await w.wait_closed()

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await self.remoting.stop()
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 5)
            self._server = None
