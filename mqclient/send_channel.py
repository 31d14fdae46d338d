"""A producer's connections to a broker's send channel (remoting/framing.py).

SendChannel lives on the client loop: requests go out as frames (those made in one loop turn
in one write), many in flight, answered by id. A lost connection fails every request in
flight with SendChannelClosed; the next request connects anew.

BlockingSendConnections serve sync sends on the caller's thread: one request at a time per
connection, idle connections kept per address for the next caller.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import select
import socket
import ssl
import threading
import time

from acl.grpc_auth import ClientAuth
from mqclient.message import MQClientError
from mqproto import common_pb2
from remoting.framing import (
    FRAME_HEADER,
    KIND_AUTH,
    MAX_FRAME_BYTES,
    REQUEST_ID_MASK,
    FrameError,
    FrameReader,
    encode_frame,
)

log = logging.getLogger(__name__)


class SendChannelClosed(ConnectionError):
    """The connection to the broker's send channel failed or closed."""


MAX_IDLE_BLOCKING_PER_ADDRESS = 16
FIRST_READ_BYTES = 16384  # an answer read with its header, when it has come (most do)


def split_address(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host.removeprefix("[").removesuffix("]"), int(port)


class SendChannel(asyncio.Protocol):
    def __init__(self, address: str) -> None:
        self.address = address
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self._reader = FrameReader()
        self._pending: dict[int, asyncio.Future[bytes]] = {}
        self._ids = itertools.count(1)
        self._out: list[bytes] = []

    @classmethod
    async def connect(cls, address: str, timeout: float,
                      auth: ClientAuth | None = None,
                      ssl_context: ssl.SSLContext | None = None) -> SendChannel:
        """A connected channel; with `auth`, authenticated (the AUTH frame) first."""
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(timeout):
                host, port = split_address(address)
                _, channel = await loop.create_connection(
                    lambda: cls(address), host, port, ssl=ssl_context,
                    server_hostname=host if ssl_context else None)
                if auth is not None:
                    check_auth_answer(address, await channel.request(
                        KIND_AUTH, auth.send_channel_auth(), timeout))
        except (OSError, TimeoutError) as e:
            raise SendChannelClosed(f"cannot connect to the send channel {address}: "
                                    f"{e or 'timed out'}") from None
        return channel

    # -- requests --------------------------------------------------------------------------
    async def request(self, kind: int, payload: bytes | list[bytes], timeout: float) -> bytes:
        """The answer's payload (`payload`: bytes, or parts of it: copied once, into the
        write of this loop turn's frames); SendChannelClosed, or TimeoutError after
        `timeout` s (the request may still be carried out)."""
        if self.closed:
            raise SendChannelClosed(f"the send channel {self.address} is closed")
        request_id = next(self._ids) & REQUEST_ID_MASK
        future = asyncio.get_running_loop().create_future()
        self._pending[request_id] = future
        out = self._out
        if not out:
            asyncio.get_running_loop().call_soon(self._flush)
        parts = payload if isinstance(payload, list) else [payload]
        out.append(FRAME_HEADER.pack(sum(map(len, parts)) + 5, request_id, kind))
        out += parts
        try:
            async with asyncio.timeout(timeout):
                return await future
        finally:
            self._pending.pop(request_id, None)

    def _flush(self) -> None:
        out, self._out = self._out, []
        if self.transport is not None and not self.closed:
            self.transport.write(b"".join(out))

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()
        self._fail_all(SendChannelClosed(f"the send channel {self.address} was closed"))

    # -- asyncio.Protocol ------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        try:
            frames = self._reader.feed(data)
        except FrameError as e:
            log.warning("send channel %s: %s; closing it", self.address, e)
            self.close()
            return
        pending = self._pending
        for request_id, _, payload in frames:
            future = pending.pop(request_id, None)
            if future is not None and not future.done():  # else: timed out already
                future.set_result(payload)

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail_all(SendChannelClosed(f"the send channel {self.address} closed"
                                         + (f": {exc}" if exc else "")))

    def _fail_all(self, error: SendChannelClosed) -> None:
        self.closed = True
        pending, self._pending = self._pending, {}
        for future in pending.values():
            if not future.done():
                future.set_exception(error)


def check_auth_answer(address: str, payload: bytes) -> None:
    """Raises MQClientError NO_PERMISSION when the broker refused the AUTH frame."""
    status = common_pb2.Status.FromString(payload)
    if status.code != common_pb2.SUCCESS:
        raise MQClientError("NO_PERMISSION", f"send channel {address}: {status.remark}")


class BlockingSendConnections:
    """Blocking connections by send channel address, for any thread."""

    def __init__(self, auth: ClientAuth | None = None,
                 ssl_context: ssl.SSLContext | None = None) -> None:
        self.auth = auth  # access control: each new connection authenticates first
        self.ssl_context = ssl_context  # TLS; None: plain TCP
        self._idle: dict[str, list[socket.socket]] = {}
        self._lock = threading.Lock()
        self.closed = False

    def request(self, address: str, kind: int, payload: bytes, timeout: float) -> bytes:
        """The answer's payload; SendChannelClosed, or TimeoutError after `timeout` s (the
        request may still be carried out)."""
        sock = self._take(address, timeout)
        try:
            answer = self._exchange(sock, address, kind, payload, timeout)
        except BaseException as e:
            sock.close()  # an answer may still come: this connection is out of step
            if isinstance(e, OSError) and not isinstance(e, TimeoutError | SendChannelClosed):
                raise SendChannelClosed(f"the send channel {address} failed: {e}") from None
            raise
        with self._lock:
            idle = self._idle.setdefault(address, [])
            if self.closed or len(idle) >= MAX_IDLE_BLOCKING_PER_ADDRESS:
                sock.close()
            else:
                idle.append(sock)
        return answer

    @staticmethod
    def _exchange(sock: socket.socket, address: str, kind: int, payload: bytes,
                  timeout: float) -> bytes:
        deadline = time.monotonic() + timeout
        sock.settimeout(timeout)
        sock.sendall(encode_frame(1, kind, payload))  # its timeout bounds the whole send
        # One request at a time per connection, so nothing follows the answer: read as much
        # of it as has come with the header (one read per answer, not two, most of the time).
        head = _receive(sock, 9, deadline, FIRST_READ_BYTES)
        length, request_id, answer_kind = FRAME_HEADER.unpack_from(head)
        if request_id != 1 or answer_kind != kind or not 5 <= length <= MAX_FRAME_BYTES:
            raise SendChannelClosed(f"the send channel {address} answered a bad frame "
                                    f"(id {request_id}, kind {answer_kind}, {length} bytes)")
        if len(head) > length + 4:
            raise SendChannelClosed(f"the send channel {address} sent more than its answer")
        body = head[9:]
        if len(body) < length - 5:
            body += _receive(sock, length - 5 - len(body), deadline)
        return body

    def _take(self, address: str, timeout: float) -> socket.socket:
        with self._lock:
            if self.closed:
                raise SendChannelClosed("the client is shut down")
            idle = self._idle.get(address)
            while idle:
                sock = idle.pop()
                if _still_open(sock):
                    return sock
                sock.close()  # the broker closed it (idle timeout, restart)
        try:
            sock = socket.create_connection(split_address(address), timeout)
        except OSError as e:
            raise SendChannelClosed(f"cannot connect to the send channel {address}: "
                                    f"{e}") from None
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.ssl_context is not None:
            host = split_address(address)[0]
            try:
                sock.settimeout(timeout)
                sock = self.ssl_context.wrap_socket(sock, server_hostname=host)
            except (OSError, ssl.SSLError) as e:
                sock.close()
                raise SendChannelClosed(f"TLS to the send channel {address} failed: {e}"
                                        ) from None
        if self.auth is not None:
            try:
                check_auth_answer(address, self._exchange(
                    sock, address, KIND_AUTH, self.auth.send_channel_auth(), timeout))
            except BaseException:
                sock.close()
                raise
        return sock

    def forget(self, address: str) -> None:
        """Closes the idle connections to `address`."""
        with self._lock:
            idle = self._idle.pop(address, [])
        for sock in idle:
            sock.close()

    def close(self) -> None:
        with self._lock:
            self.closed = True
            idle = [sock for socks in self._idle.values() for sock in socks]
            self._idle.clear()
        for sock in idle:
            sock.close()


def _still_open(sock: socket.socket) -> bool:
    """An idle pooled connection the peer has not closed (nor sent anything on)."""
    if isinstance(sock, ssl.SSLSocket):  # no MSG_PEEK there: readable = closed or astray
        try:
            readable, _, _ = select.select([sock], [], [], 0)
        except (OSError, ValueError):
            return False
        return not readable and sock.pending() == 0
    try:
        sock.settimeout(0)  # else recv waits out the socket's timeout (the caller sets it)
        sock.recv(1, socket.MSG_PEEK)  # b"": closed; bytes: out of step
    except BlockingIOError:
        return True  # nothing to read: open and idle
    except OSError:
        pass
    return False


def _receive(sock: socket.socket, n: int, deadline: float, most: int = 0) -> bytes:
    """At least `n` bytes (at most max(n, `most`)), by `deadline` (time.monotonic()) or
    TimeoutError."""
    buffer = bytearray()
    most = max(n, most)
    while len(buffer) < n:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("no whole answer in time")
        sock.settimeout(left)
        data = sock.recv(most - len(buffer))
        if not data:
            raise SendChannelClosed("the send channel closed the connection")
        buffer += data
    return bytes(buffer)
