"""Redis Streams as a peer: `redis-server` with its append-only file (XADD / XREADGROUP /
XACK through redis-py). (a) appendfsync everysec; (b) appendfsync always; (c) a replica
on this machine and WAIT 1 after each send (or each pipeline)."""

from __future__ import annotations

import contextlib
import shutil
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from bench.peers import BODY, TOPIC, Peer, Target, summary
from bench.peers.servers import (
    ServerProcess,
    free_ports,
    missing_module,
    missing_programs,
    program_version,
    wait_until,
)

GROUP = "bench"
READ_COUNT = 1000
WAIT_MS = 10_000
SETTINGS = {"a": "appendonly yes, appendfsync everysec",
            "b": "appendonly yes, appendfsync always",
            "c": "appendonly yes, appendfsync everysec, 1 replica, WAIT 1 per send/pipeline"}
FIELD = b"b"


class RedisTarget:
    def __init__(self, port: int, replicas: int) -> None:
        import redis

        self.client: Any = redis.Redis(host="127.0.0.1", port=port, socket_timeout=60)
        self.replicas = replicas

    def close(self) -> None:
        self.client.close()

    def prepare(self, topics: Sequence[str]) -> None:
        pass  # XADD creates a stream

    def _check_wait(self, acked: int) -> None:
        if acked < self.replicas:
            raise RuntimeError(f"WAIT: {acked} of {self.replicas} replicas acknowledged")

    def one_at_a_time(self, n: int) -> tuple[float, float, float]:
        latencies = []
        pipe = self.client.pipeline(transaction=False)
        started = time.perf_counter()
        for _ in range(n):
            t = time.perf_counter()
            if self.replicas:  # XADD and WAIT in one round trip
                pipe.xadd(TOPIC, {FIELD: BODY})
                pipe.execute_command("WAIT", self.replicas, WAIT_MS)
                self._check_wait(pipe.execute()[-1])
            else:
                self.client.xadd(TOPIC, {FIELD: BODY})
            latencies.append(time.perf_counter() - t)
        elapsed = time.perf_counter() - started
        return summary(n, elapsed, latencies)

    def in_flight(self, topics: Sequence[str], n: int, window: int, seconds: float
                  ) -> tuple[int, float]:
        """Pipelines of `window` XADDs (and a WAIT), one pipeline in flight."""
        pipe = self.client.pipeline(transaction=False)
        started = time.perf_counter()
        sent = 0
        for first in range(0, n, window):
            if time.perf_counter() - started > seconds:
                break
            for i in range(first, min(n, first + window)):
                pipe.xadd(topics[i % len(topics)], {FIELD: BODY})
            if self.replicas:
                pipe.execute_command("WAIT", self.replicas, WAIT_MS)
                self._check_wait(pipe.execute()[-1])
            else:
                pipe.execute()
            sent = min(n, first + window)
        return sent, sent / (time.perf_counter() - started)

    def consume(self, total: int) -> float:
        """XREADGROUP of up to READ_COUNT entries, then XACK of them, until `total`."""
        started = time.perf_counter()
        self.client.xgroup_create(TOPIC, GROUP, id="0")
        got = 0
        while got < total:
            reply = self.client.xreadgroup(GROUP, "c1", {TOPIC: ">"}, count=READ_COUNT,
                                           block=5000)
            if not reply:
                raise RuntimeError(f"redis: got {got} of {total} entries")
            entries = reply[0][1]
            self.client.xack(TOPIC, GROUP, *[entry_id for entry_id, _ in entries])
            got += len(entries)
        return total / (time.perf_counter() - started)


def _server(work: Path, name: str, port: int, fsync: str, extra: list[str]) -> ServerProcess:
    data = work / name
    data.mkdir()
    return ServerProcess(name, ["redis-server", "--bind", "127.0.0.1", "--port", str(port),
                                "--dir", str(data), "--save", "", "--appendonly", "yes",
                                "--appendfsync", fsync, "--daemonize", "no",
                                "--protected-mode", "no", *extra],
                         work / f"{name}.log")


@contextlib.contextmanager
def open_target(cls: str, work: Path) -> Iterator[Target]:
    import redis

    fsync = "always" if cls == "b" else "everysec"
    port, replica_port = free_ports(2)
    with contextlib.ExitStack() as stack:  # closes the target, then stops the servers
        stack.enter_context(_server(work, f"redis-{cls}", port, fsync, [])).wait_port(port)
        replicas = 0
        if cls == "c":
            stack.enter_context(_server(work, f"redis-{cls}-replica", replica_port, fsync,
                                        ["--replicaof", "127.0.0.1", str(port)])
                                ).wait_port(replica_port)
            replicas = 1
            master = redis.Redis(host="127.0.0.1", port=port)
            wait_until(lambda: master.info("replication").get("connected_slaves", 0) >= 1
                       and master.execute_command("WAIT", 1, 100) >= 1, 30,
                       "the redis replica")
            master.close()
        yield stack.enter_context(contextlib.closing(RedisTarget(port, replicas)))


def peer() -> Peer:
    missing = missing_programs("redis-server") or missing_module("redis", "redis")
    return Peer(name="redis", missing=missing, settings=SETTINGS, open=open_target,
                version=program_version(["redis-server", "--version"])
                if shutil.which("redis-server") else "")
