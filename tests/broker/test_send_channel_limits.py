"""Connection limits of the broker's send channel (issue 16 item 8): sendChannelMaxConnections,
the idle and frame timeouts, read buffers grown on demand, the listen backlog, one log line
for accept() failing at the fd limit, and the open files limit raised at process start."""

from __future__ import annotations

import asyncio
import errno
import logging
import re
import selectors
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from mqclient.send_channel import split_address
from remoting.framing import KIND_SEND_BATCH, encode_frame
from tests.broker.test_send_channel import Raw, answer, batch_request, raw, send_channel_address
from tests.support.brokers import BrokerThread, broker_props, write_conf
from tests.support.processes import REPO_ROOT, child_env, stop_process

Start = Callable[..., BrokerThread]
__all__ = ["raw"]  # the fixture, imported


def request(i: int) -> bytes:
    return encode_frame(i, KIND_SEND_BATCH, batch_request("TopicLim", [(b"x", [])]))


def connections(b: BrokerThread) -> int:
    return b.call(lambda: b.controller.send_channel.connection_count)


def test_max_connections(start_broker: Start, raw: Callable[[str], Raw]) -> None:
    b = start_broker(sendChannelMaxConnections=3)
    address = send_channel_address(b)
    conns = [raw(address) for _ in range(3)]
    for i, c in enumerate(conns):
        c.send(request(i + 1))
        assert answer(c.receive(1)[0], i + 1).status.code == 1
    extra = raw(address)
    assert extra.closed_by_peer(timeout=5.0), "a 4th connection was served"
    assert connections(b) == 3
    conns[0].close()
    deadline = time.monotonic() + 5
    while connections(b) > 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    again = raw(address)  # room again
    again.send(request(9))
    assert answer(again.receive(1)[0], 9).status.code == 1


def test_idle_and_half_frame_connections_are_closed(start_broker: Start,
                                                    raw: Callable[[str], Raw]) -> None:
    b = start_broker(sendChannelIdleTimeoutMills=600, sendChannelFrameTimeoutMills=600)
    address = send_channel_address(b)
    idle, used, half, trickle = (raw(address) for _ in range(4))
    used.send(request(1))
    assert answer(used.receive(1)[0], 1).status.code == 1
    frame = request(2)
    half.send(frame[:len(frame) // 2])
    t0 = time.monotonic()
    # A byte every 100 ms for 4 s: the frame still has 600 ms in all from its first byte.
    trickle.send(frame[:4])
    for i in range(4, 44):
        time.sleep(0.1)
        try:
            trickle.send(frame[i:i + 1])
        except OSError:  # closed by the broker
            break
    assert trickle.closed_by_peer(timeout=1.0)
    assert time.monotonic() - t0 < 3.0, "a trickled frame was given more than its timeout"
    for c in (idle, used, half):
        assert c.closed_by_peer(timeout=5.0)
    # Traffic keeps a connection open past the timeouts.
    busy = raw(address)
    for i in range(12):
        busy.send(request(100 + i))
        assert answer(busy.receive(1)[0], 100 + i).status.code == 1
        time.sleep(0.1)
    assert connections(b) == 1


def test_read_buffers_grow_on_demand(start_broker: Start, raw: Callable[[str], Raw]) -> None:
    b = start_broker()
    address = send_channel_address(b)
    conns = [raw(address) for _ in range(20)]
    deadline = time.monotonic() + 5
    while connections(b) < 20 and time.monotonic() < deadline:
        time.sleep(0.02)

    def buffers() -> list[int]:
        return [c.reader.buffer_bytes for c in b.controller.send_channel._connections]

    assert b.call(buffers) == [0] * 20  # connected, nothing read: no buffer
    conns[0].send(request(1))
    assert answer(conns[0].receive(1)[0], 1).status.code == 1
    assert max(b.call(buffers)) <= 16 * 1024
    big = encode_frame(2, KIND_SEND_BATCH, batch_request("TopicLim", [(b"y" * 1_000_000, [])]))
    conns[1].send(big)
    assert answer(conns[1].receive(1)[0], 2).status.code == 1


def _connect_burst(address: str, n: int, wait: float) -> int:
    """How many of `n` connects started at once complete within `wait` seconds."""
    host, port = split_address(address)
    selector = selectors.DefaultSelector()
    socks = []
    for _ in range(n):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(False)
        s.connect_ex((host, port))
        selector.register(s, selectors.EVENT_WRITE)
        socks.append(s)
    done = 0
    deadline = time.monotonic() + wait
    while done < n and (left := deadline - time.monotonic()) > 0:
        for key, _ in selector.select(timeout=left):
            selector.unregister(key.fileobj)
            done += 1
    for s in socks:
        s.close()
    return done


def test_listen_backlog_takes_a_burst(start_broker: Start) -> None:
    """While the loop is busy (accepts nothing), the kernel completes up to the backlog's
    handshakes; asyncio's default backlog of 100 drops the rest's SYNs (~1 s retransmit)."""
    b = start_broker()
    address = send_channel_address(b)
    blocked = b.loop.call_soon_threadsafe(time.sleep, 1.5)  # the loop accepts nothing now
    time.sleep(0.05)
    try:
        assert _connect_burst(address, 400, wait=0.8) == 400
    finally:
        blocked.cancel()
        time.sleep(1.6)


def test_accept_failures_log_one_line(caplog: pytest.LogCaptureFixture) -> None:
    from remoting.serving import log_accept_errors_briefly

    loop = asyncio.new_event_loop()
    try:
        log_accept_errors_briefly(loop, logging.getLogger("broker.test"))
        with caplog.at_level(logging.INFO):
            for _ in range(1000):
                loop.call_exception_handler({
                    "message": "socket.accept() out of system resource",
                    "exception": OSError(errno.EMFILE, "Too many open files")})
    finally:
        loop.close()
    lines = [r for r in caplog.records if "out of system resource" in r.getMessage()]
    assert len(lines) == 1 and lines[0].exc_info is None
    assert "Too many open files" in lines[0].getMessage()
    assert "open files limit" in lines[0].getMessage()


def _lowered_nofile() -> None:
    import resource

    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))


def _open_files_limits(pid: int) -> tuple[int, int]:
    text = Path(f"/proc/{pid}/limits").read_text()
    match = re.search(r"Max open files\s+(\d+)\s+(\d+)", text)
    assert match is not None, text
    return int(match[1]), int(match[2])


def test_processes_raise_the_open_files_limit(tmp_path: Path) -> None:
    import resource

    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard <= 256 or hard == resource.RLIM_INFINITY:
        pytest.skip(f"hard open files limit {hard}")
    conf = write_conf(tmp_path / "broker.conf", broker_props(tmp_path / "store"))
    for args, ready in ([["-m", "nameserver", "--listen", "127.0.0.1:0"], "boot success"],
                        [["-m", "broker", "-c", str(conf)], "boot success"]):
        process = subprocess.Popen([sys.executable, *args], cwd=REPO_ROOT, env=child_env(),
                                   text=True, stdout=subprocess.PIPE,
                                   stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
                                   preexec_fn=_lowered_nofile)
        try:
            assert process.stdout is not None
            line = process.stdout.readline()
            assert ready in line, line
            assert _open_files_limits(process.pid) == (hard, hard), args
        finally:
            stop_process(process, 15)


def test_a_producer_survives_the_idle_timeout(start_broker: Start) -> None:
    """The client's pooled blocking connection, closed by the broker's idle timeout, is
    replaced without a failed attempt."""
    from mqclient.send_channel import BlockingSendConnections

    b = start_broker(sendChannelIdleTimeoutMills=300)
    address = send_channel_address(b)
    pool = BlockingSendConnections()
    try:
        payload = batch_request("TopicLim", [(b"x", [])])
        for _ in range(2):
            answer((1, KIND_SEND_BATCH, pool.request(address, KIND_SEND_BATCH, payload, 10)), 1)
            deadline = time.monotonic() + 5
            time.sleep(0.5)
            while connections(b) and time.monotonic() < deadline:
                time.sleep(0.05)
            assert connections(b) == 0  # the broker closed the pooled connection
    finally:
        pool.close()
