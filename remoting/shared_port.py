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


def is_grpc_start(first: bytes) -> bool:
    """The first four bytes of an HTTP/2 (or TLS) connection, not of a remoting frame."""
    return first == HTTP2_PREFACE_START or (len(first) >= 2 and first[0] == TLS_HANDSHAKE
                                            and first[1] == 0x03)


class _Relay(asyncio.Protocol):
    """One direction's receiver of a spliced connection: what its transport receives is
    written to `peer`; when its own transport's write buffer fills (with what the other
    relay writes), the other side's reading pauses."""

    def __init__(self, peer: asyncio.Transport, done: asyncio.Future[None]) -> None:
        self.peer = peer
        self.done = done

    def data_received(self, data: bytes) -> None:
        self.peer.write(data)

    def eof_received(self) -> bool:
        if self.peer.can_write_eof():
            self.peer.write_eof()
        return True  # half-closed: the other direction goes on

    def connection_lost(self, exc: Exception | None) -> None:
        self.peer.close()
        if not self.done.done():
            self.done.set_result(None)

    def pause_writing(self) -> None:
        self.peer.pause_reading()

    def resume_writing(self) -> None:
        self.peer.resume_reading()


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
        """Relays the connection to the gRPC server, transport to transport (no stream
        reads: each chunk is written on as it arrives)."""
        loop = asyncio.get_running_loop()
        client = writer.transport
        assert isinstance(client, asyncio.Transport)
        upstream_done: asyncio.Future[None] = loop.create_future()
        client_done: asyncio.Future[None] = loop.create_future()
        client.pause_reading()
        try:
            upstream, _ = await asyncio.wait_for(loop.create_connection(
                lambda: _Relay(client, upstream_done), self.grpc_host, self.grpc_port), 5)
        except (OSError, TimeoutError) as e:
            log.warning("cannot relay a gRPC connection to %s:%d: %s", self.grpc_host,
                        self.grpc_port, e)
            writer.close()
            return
        self.spliced += 1
        # What the stream reader holds past the first bytes goes first (CPython's
        # StreamReader keeps it in _buffer); from here the client's bytes go straight on.
        held = bytes(reader._buffer)  # noqa: SLF001
        reader._buffer.clear()  # noqa: SLF001
        upstream.write(first + held)
        if reader.at_eof():  # the client finished writing before the relay took over
            upstream.write_eof()
        client.set_protocol(_Relay(upstream, client_done))
        client.resume_reading()
        try:
            await asyncio.gather(upstream_done, client_done)
        finally:
            upstream.close()
            client.close()

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
