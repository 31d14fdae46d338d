"""Connections on a broker's send channel (issue 16 item 8):
`python -m bench.channel_limits [--idle 500] [--burst 1000] [--tree DIR]`.

Starts a broker process (no name server), then
1. opens `--idle` connections that send nothing and reads the broker's RSS before and after
   (its growth per connection is what an idle connection costs); then has each send one
   small request and go idle again (what a connection that was used costs);
2. closes them and starts `--burst` non-blocking connects at once: each one's handshake
   time (p50, p99, max; a SYN dropped by a full listen queue is retransmitted after ~1 s).
The last line is one JSON object. `--tree` runs the broker of another checkout (before /
after comparisons).
"""

from __future__ import annotations

import argparse
import json
import re
import selectors
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import grpc

from mqproto import messaging_pb2, messaging_pb2_grpc
from remoting.framing import KIND_SEND_BATCH, encode_batch_message, encode_frame


def rss_kib(pid: int) -> int:
    text = Path(f"/proc/{pid}/status").read_text()
    match = re.search(r"VmRSS:\s+(\d+) kB", text)
    assert match is not None
    return int(match[1])


def start_broker(root: Path, tree: Path, name: str = "bench-channel",
                 *settings: str) -> tuple[subprocess.Popen[str], str]:
    """A broker process on a free loopback port (its conf under `root`, run from `tree`)
    with extra broker.conf `settings`; returns it and its address."""
    conf = root / "broker.conf"
    conf.write_text("\n".join([
        f"brokerName={name}", "listenPort=0", "bindAddress=127.0.0.1",
        "brokerIP1=127.0.0.1", f"storePathRootDir={root / 'store'}", *settings, ""]))
    process = subprocess.Popen([sys.executable, "-m", "broker", "-c", str(conf)],
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                               cwd=tree)
    assert process.stdout is not None
    line = process.stdout.readline()
    match = re.search(r", ([^\]]+)\] boot success", line)
    if match is None:
        process.kill()
        raise SystemExit(f"the broker did not start: {line!r}")
    return process, match[1]


def split(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host, int(port)


def request_frame(i: int) -> bytes:
    payload = messaging_pb2.SendBatchRequest(
        producer_group="PG", topic="BenchChannel", queue_id=0,
        encoded_messages=encode_batch_message(0, b"x" * 100, b""),
        born_timestamp=int(time.time() * 1000)).SerializeToString()
    return encode_frame(i, KIND_SEND_BATCH, payload)


def settle_rss(pid: int) -> int:
    time.sleep(1.0)
    return rss_kib(pid)


def idle_connections(pid: int, address: str, n: int) -> dict[str, object]:
    base = settle_rss(pid)
    socks = [socket.create_connection(split(address), timeout=10) for _ in range(n)]
    idle = settle_rss(pid)
    for i, s in enumerate(socks):
        s.sendall(request_frame(i + 1))
    answered = 0
    for s in socks:
        s.settimeout(10)
        try:
            answered += bool(s.recv(65536))
        except OSError:
            pass
    used = settle_rss(pid)
    for s in socks:
        s.close()
    return {"connections": n, "rss_base_mib": round(base / 1024, 1),
            "idle_rss_growth_mib": round((idle - base) / 1024, 1),
            "idle_kib_per_connection": round((idle - base) / n, 1),
            "used_rss_growth_mib": round((used - base) / 1024, 1),
            "used_kib_per_connection": round((used - base) / n, 1), "answered": answered}


def burst(address: str, n: int) -> dict[str, object]:
    """`n` non-blocking connects started at once; each one's time to complete the
    handshake (a SYN the full listen queue dropped is retransmitted after ~1 s)."""
    host, port = split(address)
    selector = selectors.DefaultSelector()
    started: dict[socket.socket, float] = {}
    for _ in range(n):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(False)
        started[s] = time.perf_counter()
        s.connect_ex((host, port))
        selector.register(s, selectors.EVENT_WRITE)
    times: list[float] = []
    failed = 0
    deadline = time.perf_counter() + 30
    while selector.get_map() and time.perf_counter() < deadline:
        for key, _ in selector.select(timeout=1):
            s = key.fileobj
            assert isinstance(s, socket.socket)
            selector.unregister(s)
            if s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR):
                failed += 1
            else:
                times.append(time.perf_counter() - started[s])
    failed += len(selector.get_map())
    for s in started:
        s.close()
    times.sort()
    return {"burst": n, "connected": len(times), "failed": failed,
            "connect_p50_ms": round(statistics.median(times) * 1000, 1) if times else None,
            "connect_p99_ms": round(times[int(len(times) * 0.99) - 1] * 1000, 1)
            if times else None,
            "connect_max_ms": round(times[-1] * 1000, 1) if times else None,
            "over_900_ms": sum(1 for t in times if t > 0.9)}


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.channel_limits", description=__doc__)
    parser.add_argument("--idle", type=int, default=500)
    parser.add_argument("--burst", type=int, default=1000)
    parser.add_argument("--tree", type=Path, default=Path(__file__).resolve().parents[1],
                        help="the checkout whose broker runs (default: this one)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-channel-") as tmp:
        process, address = start_broker(Path(tmp), args.tree)
        try:
            with grpc.insecure_channel(address) as channel:
                channel_addr = messaging_pb2_grpc.MessagingServiceStub(channel).GetSendChannel(
                    messaging_pb2.GetSendChannelRequest(), timeout=10).address
            result: dict[str, object] = {"tree": str(args.tree)}
            result.update(idle_connections(process.pid, channel_addr, args.idle))
            time.sleep(0.5)
            result.update(burst(channel_addr, args.burst))
        finally:
            process.terminate()
            process.wait(timeout=30)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
