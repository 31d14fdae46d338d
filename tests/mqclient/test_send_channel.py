"""The producer's send channel against real name server and broker processes on loopback:
a broker restarted with its send channel elsewhere, and a broker that does not answer; and
the client's connections (mqclient/send_channel.py) against a fake send channel started
here that reads requests but answers late or never."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator

import grpc
import pytest

import mqclient.loop as mqclient_loop
from mqclient import Message, MQClientError, Producer, SendResult, SendStatus
from mqclient.send_channel import BlockingSendConnections, SendChannel, SendChannelClosed
from mqproto import messaging_pb2, messaging_pb2_grpc
from remoting.framing import KIND_SEND_BATCH, encode_frame
from tests.mqclient.conftest import Cluster
from tests.support.brokers import pull_everything
from tests.support.ports import free_port
from tests.support.processes import Process
from tests.support.waiting import wait_until

RPC_TIMEOUT_S = 10.0


@contextlib.contextmanager
def messaging(address: str) -> Iterator[messaging_pb2_grpc.MessagingServiceStub]:
    channel = grpc.insecure_channel(address)
    try:
        yield messaging_pb2_grpc.MessagingServiceStub(channel)
    finally:
        channel.close()


def send_channel_address(broker: Process) -> str:
    with messaging(broker.address) as stub:
        return stub.GetSendChannel(messaging_pb2.GetSendChannelRequest(),
                                   timeout=RPC_TIMEOUT_S).address


def stored_ids(broker: Process, topic: str, queues: int) -> set[str]:
    with messaging(broker.address) as stub:
        return {m.system_properties.message_id for q in range(queues)
                for m in pull_everything(stub, topic, q)}


def test_producer_follows_a_restarted_broker_to_its_new_send_channel(
        cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    """Same gRPC port, a new send channel port (sendListenPort=0): once the broker is back,
    sync and async sends succeed again (by gRPC for SEND_CHANNEL_FALLBACK_S after the
    failures, then over the new send channel: the producer asks GetSendChannel anew)."""
    monkeypatch.setattr(mqclient_loop, "SEND_CHANNEL_FALLBACK_S", 1.0)
    port = free_port()
    conf = {"listenPort": port, "haListenPort": 0, "sendListenPort": 0, "grpcProxyPort": 0}
    broker = cluster.start_broker("broker-a", **conf)
    old_channel = send_channel_address(broker)
    topic = "TopicRestart"
    ok: list[SendResult] = []
    with Producer("PG", cluster.namesrv_addr, default_topic_queue_nums=2,
                  send_timeout_s=3) as producer:
        channels = producer.instance.channels
        ok.append(producer.send(Message(topic, b"before-sync")))
        ok.append(producer.send_async(Message(topic, b"before-async")).result(timeout=10))
        assert channels.known_send_address(broker.address) == old_channel

        assert broker.stop(signal.SIGTERM) == 0
        down_started = time.monotonic()
        with pytest.raises(MQClientError):  # nothing listens: refused, not hanging
            producer.send(Message(topic, b"down-sync"), timeout_s=1)
        with pytest.raises(MQClientError):
            producer.send_async(Message(topic, b"down-async"), timeout_s=1).result(timeout=10)
        assert time.monotonic() - down_started < 4

        broker = cluster.start_broker("broker-a", **conf)
        assert broker.address.endswith(f":{port}")
        new_channel = send_channel_address(broker)
        assert new_channel and new_channel != old_channel

        # The first sends may still fail (the client's gRPC channel backs off reconnecting).
        def sync_send() -> SendResult | None:
            try:
                return producer.send(Message(topic, b"after-first"), timeout_s=1)
            except MQClientError:
                return None

        ok.append(wait_until(sync_send, timeout=15, interval=0.2, message="a sync send"))
        ok += [producer.send(Message(topic, b"after-sync%d" % i)) for i in range(10)]
        futures = [producer.send_async(Message(topic, b"after-async%d" % i)) for i in range(30)]
        ok += [f.result(timeout=10) for f in futures]
        ok += producer.send_batch([Message(topic, b"after-batch%d" % i) for i in range(3)])
        assert {r.status for r in ok} == {SendStatus.SEND_OK}
        # The failures put the broker's sends on gRPC for a while; after it, the new channel.
        time.sleep(mqclient_loop.SEND_CHANNEL_FALLBACK_S)
        ok.append(producer.send(Message(topic, b"after-fallback")))
        ok.append(producer.send_async(Message(topic, b"after-fallback-async")).result(10))
        assert channels.known_send_address(broker.address) == new_channel
    assert {r.msg_id for r in ok} <= stored_ids(broker, topic, 2)


def test_sync_send_to_a_broker_that_does_not_answer_times_out(cluster: Cluster) -> None:
    broker = cluster.start_broker("broker-a")
    topic = "TopicStall"
    timeout_s = 1.0
    with Producer("PG", cluster.namesrv_addr, default_topic_queue_nums=2,
                  send_timeout_s=timeout_s) as producer:
        warm = [producer.send(Message(topic, b"warm%d" % i)) for i in range(4)]
        warm.append(producer.send_async(Message(topic, b"warm-async")).result(timeout=10))
        assert producer.instance.channels.known_send_address(broker.address)

        os.kill(broker.pid, signal.SIGSTOP)
        try:
            started = time.monotonic()
            with pytest.raises(MQClientError) as e:
                producer.send(Message(topic, b"stalled"))
            elapsed = time.monotonic() - started
            assert e.value.code == "TIMEOUT", e.value
            assert timeout_s * 0.9 <= elapsed < timeout_s + 1.0, elapsed

            started = time.monotonic()
            with pytest.raises(MQClientError) as e:
                producer.send(Message(topic, b"stalled-2"), timeout_s=0.5)
            elapsed = time.monotonic() - started
            assert e.value.code == "TIMEOUT", e.value
            assert 0.45 <= elapsed < 1.5, elapsed

            started = time.monotonic()  # async sends time out alike
            future = producer.send_async(Message(topic, b"stalled-async"))
            error = future.exception(timeout=timeout_s + 5)
            elapsed = time.monotonic() - started
            assert isinstance(error, MQClientError) and error.code == "TIMEOUT", error
            assert timeout_s * 0.9 <= elapsed < timeout_s + 1.0, elapsed
        finally:
            os.kill(broker.pid, signal.SIGCONT)

        after = [producer.send(Message(topic, b"after%d" % i), timeout_s=5) for i in range(5)]
        after += producer.send_batch([Message(topic, b"batch%d" % i) for i in range(3)],
                                     timeout_s=5)
        after.append(producer.send_async(Message(topic, b"after-async"),
                                         timeout_s=5).result(timeout=10))
        assert {r.status for r in after} == {SendStatus.SEND_OK}
    assert {r.msg_id for r in warm + after} <= stored_ids(broker, topic, 2)


def test_async_sends_to_a_stalled_broker_time_out_by_their_own_clock_never_sent_twice(
        cluster: Cluster) -> None:
    """Async sends over many topics while the broker is stopped (SIGSTOP): each fails
    TIMEOUT no earlier than its timeout after its send_async (they failed as early as
    0.13 s: the deadline counted from the batch's opening, and a frame waited only as long
    as its most urgent batch, then retried them all) and within twice it; none is stored
    twice once the broker resumes (a frame that timed out is not retried: every deadline in
    it has passed)."""
    broker = cluster.start_broker("broker-a")
    timeout_s = 1.0
    topics = [f"TopicStalled{i}" for i in range(20)]
    with Producer("PG", cluster.namesrv_addr, default_topic_queue_nums=2,
                  send_timeout_s=timeout_s) as producer:
        for topic in topics:  # routes and the send channel known before the stall
            producer.send(Message(topic, f"{topic}-warm".encode()), timeout_s=10)
        os.kill(broker.pid, signal.SIGSTOP)
        sent: list[tuple[float, list[float], object]] = []
        try:
            for i in range(30):  # 600 sends over 1.5 s
                for topic in topics:
                    done_at: list[float] = []
                    future = producer.send_async(Message(topic, f"{topic}-{i}".encode()))
                    future.add_done_callback(lambda _, d=done_at: d.append(time.monotonic()))
                    sent.append((time.monotonic(), done_at, future))
                time.sleep(0.05)
            for _, _, future in sent:
                future.exception(timeout=2 * timeout_s + 5)  # type: ignore[attr-defined]
        finally:
            os.kill(broker.pid, signal.SIGCONT)
        waited = [done_at[0] - at for at, done_at, _ in sent]
        codes = {getattr(f.exception(), "code", None) for _, _, f in sent}  # type: ignore[attr-defined]
        assert codes == {"TIMEOUT"}, codes
        assert timeout_s * 0.95 <= min(waited) and max(waited) < 2 * timeout_s + 0.5, (
            min(waited), max(waited))
        assert producer.send_async(Message(topics[0], b"after")).result(timeout=10)
    with messaging(broker.address) as stub:
        bodies = [m.body for topic in topics for q in range(2)
                  for m in pull_everything(stub, topic, q)]
    assert len(bodies) == len(set(bodies)), "a message stored twice"


# -- a send channel that reads but answers late or never --------------------------------------
class FakeSendChannel:
    """A loopback server: each connection it accepts is handed to `serve(conn, stop)` on
    its thread; close() stops it and joins the thread."""

    def __init__(self, serve: Callable[[socket.socket, threading.Event], None],
                 receive_buffer: int | None = None) -> None:
        self.listener = socket.socket()
        if receive_buffer:  # inherited by accepted connections
            self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen()
        self.listener.settimeout(0.05)
        self.address = f"127.0.0.1:{self.listener.getsockname()[1]}"
        self.stop = threading.Event()
        self._serve = serve
        self.thread = threading.Thread(target=self._run, name="fake-send-channel",
                                       daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with conn:
                conn.settimeout(0.05)
                with contextlib.suppress(OSError):
                    self._serve(conn, self.stop)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(10)
        self.listener.close()
        assert not self.thread.is_alive()


def read_until_closed(conn: socket.socket, stop: threading.Event) -> None:
    """Reads everything, answers nothing."""
    while not stop.is_set():
        try:
            if not conn.recv(1 << 20):
                return
        except TimeoutError:
            continue


def read_late(conn: socket.socket, stop: threading.Event) -> None:
    """Reads nothing for 0.8 s (a stalled broker), then everything; answers nothing."""
    if not stop.wait(0.8):
        read_until_closed(conn, stop)


def read_request(conn: socket.socket, stop: threading.Event) -> bool:
    """Reads a request of 3 payload bytes (9 + 3 bytes); False when the client went away."""
    got = b""
    while len(got) < 12 and not stop.is_set():
        with contextlib.suppress(TimeoutError):
            data = conn.recv(64)
            if not data:
                return False
            got += data
    return True


def answer_slowly(conn: socket.socket, stop: threading.Event) -> None:
    """Reads a request (9 bytes + 3 of payload), then trickles an answer of 8 payload bytes
    out, a byte every 0.25 s (2 s in all)."""
    if not read_request(conn, stop):
        return
    frame = encode_frame(1, KIND_SEND_BATCH, b"answered")
    conn.sendall(frame[:9])
    for i in range(9, len(frame)):
        if stop.wait(0.25):
            return
        conn.sendall(frame[i:i + 1])
    read_until_closed(conn, stop)


@pytest.fixture
def fake_channel() -> Iterator[Callable[..., FakeSendChannel]]:
    started: list[FakeSendChannel] = []

    def start(serve: Callable[[socket.socket, threading.Event], None],
              receive_buffer: int | None = None) -> FakeSendChannel:
        started.append(FakeSendChannel(serve, receive_buffer))
        return started[-1]

    yield start
    for server in started:
        server.close()


BIG_PAYLOAD = b"p" * (16 << 20)  # more than loopback buffers hold while no one reads


def _blocking_request(address: str, payload: bytes, timeout: float) -> float:
    """Seconds until BlockingSendConnections.request raised TimeoutError."""
    connections = BlockingSendConnections()
    started = time.monotonic()
    try:
        with pytest.raises(TimeoutError):
            connections.request(address, KIND_SEND_BATCH, payload, timeout)
        return time.monotonic() - started
    finally:
        connections.close()


def test_blocking_request_never_answered_times_out(
        fake_channel: Callable[..., FakeSendChannel]) -> None:
    server = fake_channel(read_until_closed)
    elapsed = _blocking_request(server.address, b"abc", 0.5)
    assert 0.45 <= elapsed < 0.9, elapsed


def test_channel_request_times_out_at_its_deadline(
        fake_channel: Callable[..., FakeSendChannel]) -> None:
    """The loop's SendChannel: the timeout bounds the whole request, whatever the server."""
    servers = [fake_channel(read_until_closed), fake_channel(read_late, 64 * 1024),
               fake_channel(answer_slowly)]
    payloads = [b"abc", BIG_PAYLOAD, b"abc"]

    async def request(address: str, payload: bytes) -> float:
        channel = await SendChannel.connect(address, 5)
        try:
            started = time.monotonic()
            with pytest.raises(TimeoutError):
                await channel.request(KIND_SEND_BATCH, payload, 1.0)
            return time.monotonic() - started
        finally:
            channel.close()

    for server, payload in zip(servers, payloads, strict=True):
        elapsed = asyncio.run(request(server.address, payload))
        assert 0.95 <= elapsed < 1.4, (server.address, elapsed)


@pytest.mark.parametrize("case", ["stalled-reader", "trickled-answer"])
def test_blocking_request_timeout_is_a_deadline(
        case: str, fake_channel: Callable[..., FakeSendChannel]) -> None:
    if case == "stalled-reader":  # 16 MB to a server that reads from 0.8 s on
        server = fake_channel(read_late, 64 * 1024)
        payload = BIG_PAYLOAD
    else:  # an answer whose bytes come 0.25 s apart (2 s in all)
        server = fake_channel(answer_slowly)
        payload = b"abc"
    connections = BlockingSendConnections()
    started = time.monotonic()
    try:
        with contextlib.suppress(TimeoutError):
            connections.request(server.address, KIND_SEND_BATCH, payload, 1.0)
    finally:
        connections.close()
    elapsed = time.monotonic() - started
    assert elapsed < 1.4, f"request(timeout=1.0) returned after {elapsed:.2f} s"


def answer_with(*pieces: bytes) -> Callable[[socket.socket, threading.Event], None]:
    """Reads a request (9 bytes + 3 of payload), then writes `pieces` 0.05 s apart."""
    def serve(conn: socket.socket, stop: threading.Event) -> None:
        if not read_request(conn, stop):
            return
        for piece in pieces:
            conn.sendall(piece)
            if stop.wait(0.05):
                return
        read_until_closed(conn, stop)
    return serve


ANSWER = encode_frame(1, KIND_SEND_BATCH, b"the answer " * 100)


@pytest.mark.parametrize("cut", [len(ANSWER), 9, 4, 500])
def test_blocking_request_reads_an_answer_however_it_arrives(
        cut: int, fake_channel: Callable[..., FakeSendChannel]) -> None:
    """Whole, header alone then the rest, part of a header, or cut inside the payload: the
    same answer (the client reads what came with the header in the same read)."""
    server = fake_channel(answer_with(ANSWER[:cut], ANSWER[cut:]))
    connections = BlockingSendConnections()
    try:
        assert connections.request(server.address, KIND_SEND_BATCH, b"abc", 5.0) == (
            b"the answer " * 100)
    finally:
        connections.close()


def test_blocking_request_refuses_bytes_after_its_answer(
        fake_channel: Callable[..., FakeSendChannel]) -> None:
    server = fake_channel(answer_with(ANSWER + b"astray"))
    connections = BlockingSendConnections()
    try:
        with pytest.raises(SendChannelClosed, match="more than its answer"):
            connections.request(server.address, KIND_SEND_BATCH, b"abc", 5.0)
    finally:
        connections.close()


def test_sends_go_by_grpc_while_the_send_channel_refuses_connections(
        cluster: Cluster) -> None:
    """A broker whose send channel is full (sendChannelMaxConnections taken by idle
    connections: a trial's flood) still takes sends: by gRPC, not three failed attempts."""
    broker = cluster.start_broker("broker-a", sendChannelMaxConnections=1)
    host, _, port = send_channel_address(broker).rpartition(":")
    topic = "TopicFull"
    with Producer("PG", cluster.namesrv_addr, default_topic_queue_nums=2) as producer, \
            socket.create_connection((host, int(port))):  # the one connection allowed
        time.sleep(0.5)  # accepted before the producer's
        sent = [producer.send(Message(topic, b"sync%d" % i)) for i in range(5)]
        sent.append(producer.send_async(Message(topic, b"async")).result(timeout=10))
    assert {r.status for r in sent} == {SendStatus.SEND_OK}
    assert {r.msg_id for r in sent} <= stored_ids(broker, topic, 2)
