"""remoting.tls_server (the send channel's TLS layer) on its own: frames of any size both
ways, reads paused and resumed with records waiting, clients refused (plaintext, untrusted,
no certificate under mutual TLS, silent past the handshake timeout) while the server keeps
serving, and the application told when a client closes."""

from __future__ import annotations

import asyncio
import socket
import ssl
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from mqclient.send_channel import BlockingSendConnections, SendChannelClosed
from remoting.framing import KIND_SEND_BATCH, FrameReader, encode_frame
from remoting.tls import ClientTls, ServerTls, make_local_ca
from remoting.tls_server import TlsServerProtocol
from tests.support.waiting import wait_until

CaFiles = tuple[Path, Path, Path]
TIMEOUT_S = 10.0


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> CaFiles:
    return make_local_ca(tmp_path_factory.mktemp("tls") / "ca")


class Echo(asyncio.BufferedProtocol):
    """Answers each frame with its payload reversed; `pause_after` frames, pauses reading
    for a moment."""

    def __init__(self, events: list[str], pause_after: int = 0) -> None:
        self.reader = FrameReader(initial_bytes=4096)
        self.transport: asyncio.Transport | None = None
        self.events = events
        self.pause_after = pause_after
        self.frames = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.events.append("made " + str(transport.get_extra_info("cipher")[1]))

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.reader.get_buffer()

    def buffer_updated(self, nbytes: int) -> None:
        assert self.transport is not None
        for request_id, kind, payload in self.reader.received(nbytes):
            self.transport.write(encode_frame(request_id, kind, payload[::-1]))
            self.frames += 1
            if self.frames == self.pause_after:
                self.transport.pause_reading()
                asyncio.get_running_loop().call_later(0.2, self.transport.resume_reading)

    def connection_lost(self, exc: Exception | None) -> None:
        self.events.append("lost")


class Server:
    """A TlsServerProtocol server on its own loop thread."""

    def __init__(self, context: ssl.SSLContext, app: Callable[[], asyncio.BufferedProtocol],
                 handshake_timeout_s: float = TIMEOUT_S) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

        async def start() -> asyncio.Server:
            return await self.loop.create_server(
                lambda: TlsServerProtocol(context, app, handshake_timeout_s), "127.0.0.1", 0)

        self.server = asyncio.run_coroutine_threadsafe(start(), self.loop).result(TIMEOUT_S)
        self.address = f"127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    def stop(self) -> None:
        async def stop() -> None:
            self.server.close()
            await self.server.wait_closed()

        asyncio.run_coroutine_threadsafe(stop(), self.loop).result(TIMEOUT_S)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(TIMEOUT_S)
        self.loop.close()


@pytest.fixture
def events() -> list[str]:
    return []


@pytest.fixture
def echo_server(ca: CaFiles, events: list[str]) -> Iterator[Server]:
    _, cert, key = ca
    server = Server(ServerTls(str(cert), str(key)).ssl_context(), lambda: Echo(events, 3))
    yield server
    server.stop()


def client(ca: CaFiles) -> BlockingSendConnections:
    return BlockingSendConnections(ssl_context=ClientTls(str(ca[0])).ssl_context())


def test_frames_of_any_size_both_ways(echo_server: Server, ca: CaFiles,
                                      events: list[str]) -> None:
    conns = client(ca)
    try:
        # 4 MiB: many records and many socket reads; the 3rd frame pauses reading
        for size in (1, 100, 16 * 1024, 33 * 1024, 4 * 1024 * 1024, 10, 70 * 1024):
            payload = bytes(range(256)) * (size // 256) + b"x" * (size % 256)
            assert conns.request(echo_server.address, KIND_SEND_BATCH, payload,
                                 TIMEOUT_S) == payload[::-1]
    finally:
        conns.close()
    wait_until(lambda: "lost" in events, TIMEOUT_S)
    assert events[0].startswith("made TLS")


def test_frames_waiting_while_paused_are_read_on_resume(echo_server: Server,
                                                        ca: CaFiles) -> None:
    context = ClientTls(str(ca[0])).ssl_context()
    host, port = echo_server.address.split(":")
    with context.wrap_socket(socket.create_connection((host, int(port)), TIMEOUT_S),
                             server_hostname=host) as sock:
        # ten frames in one write: reading pauses after the 3rd with the rest received
        sock.sendall(b"".join(encode_frame(i, KIND_SEND_BATCH, b"ab%d" % i)
                              for i in range(10)))
        sock.settimeout(TIMEOUT_S)
        reader = FrameReader()
        answers: list[tuple[int, int, bytes]] = []
        while len(answers) < 10:
            data = sock.recv(65536)
            assert data
            answers += reader.feed(data)
    assert [(i, p) for i, _, p in answers] == [(i, (b"ab%d" % i)[::-1]) for i in range(10)]


def test_refused_clients_and_the_server_keeps_serving(echo_server: Server, ca: CaFiles,
                                                      tmp_path: Path) -> None:
    plain = BlockingSendConnections()
    with pytest.raises((SendChannelClosed, TimeoutError, ConnectionError)):
        plain.request(echo_server.address, KIND_SEND_BATCH, b"hello", 3)
    plain.close()
    other = make_local_ca(tmp_path / "other")
    untrusting = client(other)
    with pytest.raises(SendChannelClosed, match="TLS"):
        untrusting.request(echo_server.address, KIND_SEND_BATCH, b"hello", 3)
    untrusting.close()
    conns = client(ca)
    try:
        assert conns.request(echo_server.address, KIND_SEND_BATCH, b"hello",
                             TIMEOUT_S) == b"olleh"
    finally:
        conns.close()


def test_a_silent_client_is_closed_after_the_handshake_timeout(ca: CaFiles,
                                                               events: list[str]) -> None:
    _, cert, key = ca
    server = Server(ServerTls(str(cert), str(key)).ssl_context(), lambda: Echo(events),
                    handshake_timeout_s=0.2)
    try:
        host, port = server.address.split(":")
        with socket.create_connection((host, int(port)), TIMEOUT_S) as sock:
            sock.settimeout(TIMEOUT_S)
            assert sock.recv(1) == b""  # closed by the server, nothing said
        assert events == []  # the application never saw it
    finally:
        server.stop()


def test_mutual_tls_needs_a_client_certificate(ca: CaFiles, events: list[str]) -> None:
    ca_pem, cert, key = ca
    server = Server(ServerTls(str(cert), str(key), str(ca_pem), mutual=True).ssl_context(),
                    lambda: Echo(events))
    try:
        anonymous = client(ca)
        with pytest.raises((SendChannelClosed, TimeoutError, ConnectionError)):
            anonymous.request(server.address, KIND_SEND_BATCH, b"hi", 3)
        anonymous.close()
        with_cert = BlockingSendConnections(
            ssl_context=ClientTls(str(ca_pem), str(cert), str(key)).ssl_context())
        try:
            assert with_cert.request(server.address, KIND_SEND_BATCH, b"hi",
                                     TIMEOUT_S) == b"ih"
        finally:
            with_cert.close()
    finally:
        server.stop()


def test_close_from_the_application_ends_the_connection(ca: CaFiles,
                                                        events: list[str]) -> None:
    class CloseAfterAnswer(Echo):
        def buffer_updated(self, nbytes: int) -> None:
            super().buffer_updated(nbytes)
            assert self.transport is not None
            self.transport.close()  # the answer still goes out, then close_notify
            assert self.transport.is_closing()

    _, cert, key = ca
    server = Server(ServerTls(str(cert), str(key)).ssl_context(),
                    lambda: CloseAfterAnswer(events))
    try:
        host, port = server.address.split(":")
        context = ClientTls(str(ca[0])).ssl_context()
        with context.wrap_socket(socket.create_connection((host, int(port)), TIMEOUT_S),
                                 server_hostname=host) as sock:
            sock.settimeout(TIMEOUT_S)
            sock.sendall(encode_frame(7, KIND_SEND_BATCH, b"bye"))
            reader = FrameReader()
            frames: list[tuple[int, int, bytes]] = []
            while not frames:
                frames = reader.feed(sock.recv(65536))
            assert frames == [(7, KIND_SEND_BATCH, b"eyb")]
            assert sock.recv(1) == b""  # close_notify, then EOF
        wait_until(lambda: "lost" in events, TIMEOUT_S)
    finally:
        server.stop()
