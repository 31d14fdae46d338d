"""NATS JetStream as a peer: `nats-server -js` with the file store, one stream per topic,
driven by nats-py. (a) the default (the file store fsyncs every 2 minutes); (b)
`sync_interval: always` (nats-server 2.10 and later); (c) a 3-server cluster on loopback
and streams of 3 replicas (acknowledged once a quorum of 2 has the message)."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from bench.peers import BODY, TOPIC, Peer, Target, one_by_one, summary
from bench.peers.servers import (
    ServerProcess,
    free_ports,
    missing_module,
    missing_programs,
    program_version,
)

SERVER = "nats-server"
READ_BATCH = 256
CLUSTER_SIZE = 3
READY_TIMEOUT_S = 60.0
LOAD_GRACE_S = 60.0  # a send load's time limit beyond its own
CLOSE_TIMEOUT_S = 10.0
SETTINGS = {"a": "file store, default sync (fsync every 2 min), 1 replica",
            "b": "file store, sync_interval: always, 1 replica",
            "c": f"file store, default sync, {CLUSTER_SIZE}-server cluster, "
                 f"{CLUSTER_SIZE} replicas"}


class JetStreamTarget:
    def __init__(self, urls: list[str], replicas: int) -> None:
        import nats

        self.replicas = replicas
        self.runner = asyncio.Runner()
        self.nc: Any = self.runner.run(nats.connect(servers=urls, connect_timeout=10,
                                                    max_reconnect_attempts=3))
        self.js: Any = self.nc.jetstream(timeout=30)

    def close(self) -> None:
        try:  # bounded: with a server gone, the client may be reconnecting
            self.runner.run(asyncio.wait_for(self.nc.close(), CLOSE_TIMEOUT_S))
        except (TimeoutError, OSError) as e:
            print(f"jetstream: closing the client: {type(e).__name__}", flush=True)
        finally:
            # Tasks a failed or interrupted load left behind end here; what they raised is
            # that load's failure, reported already, not news.
            self.runner.get_loop().set_exception_handler(lambda loop, context: None)
            self.runner.close()

    async def _add_streams(self, names: Sequence[str]) -> None:
        from nats.js.api import StorageType, StreamConfig

        for name in names:
            deadline = time.monotonic() + READY_TIMEOUT_S
            while True:  # a new cluster answers once its meta leader is elected
                try:
                    await self.js.add_stream(StreamConfig(
                        name=name, subjects=[name], storage=StorageType.FILE,
                        num_replicas=self.replicas))
                    break
                except Exception:
                    if time.monotonic() > deadline:
                        raise
                    await asyncio.sleep(0.5)

    def prepare(self, topics: Sequence[str]) -> None:
        self.runner.run(self._add_streams([TOPIC, *topics]))

    def one_at_a_time(self, n: int) -> tuple[float, float, float]:
        started = time.perf_counter()
        latencies = self.runner.run(one_by_one(lambda: self.js.publish(TOPIC, BODY), n))
        return summary(n, time.perf_counter() - started, latencies)

    async def _in_flight(self, topics: Sequence[str], n: int, window: int, stop_at: float
                         ) -> int:
        js = self.nc.jetstream(timeout=30, publish_async_max_pending=window)
        futures = []
        for i in range(n):
            if i % window == 0 and time.perf_counter() > stop_at:
                break
            futures.append(await js.publish_async(topics[i % len(topics)], BODY))
        await asyncio.wait_for(asyncio.gather(*futures), 120)
        return len(futures)

    def in_flight(self, topics: Sequence[str], n: int, window: int, seconds: float
                  ) -> tuple[int, float]:
        """publish_async with at most `window` acks pending."""
        started = time.perf_counter()
        # Bounded as a whole: publish_async waits for room among the pending acks without a
        # deadline, forever once a server is gone.
        sent = self.runner.run(asyncio.wait_for(
            self._in_flight(topics, n, window, started + seconds), seconds + LOAD_GRACE_S))
        return sent, sent / (time.perf_counter() - started)

    async def _consume(self, total: int) -> None:
        from nats.js.api import AckPolicy, ConsumerConfig

        sub = await self.js.pull_subscribe(TOPIC, durable="bench", stream=TOPIC,
                                           config=ConsumerConfig(ack_policy=AckPolicy.ALL))
        got = 0
        while got < total:
            msgs = await sub.fetch(READ_BATCH, timeout=10)
            got += len(msgs)
            await msgs[-1].ack()  # AckPolicy.ALL: acknowledges the batch
        await sub.unsubscribe()

    def consume(self, total: int) -> float:
        """A durable pull consumer: fetches of READ_BATCH, the last of each acknowledged."""
        started = time.perf_counter()
        self.runner.run(self._consume(total))
        return total / (time.perf_counter() - started)


def _config(store: Path, port: int, sync_always: bool, name: str = "",
            cluster_port: int = 0, routes: Sequence[int] = ()) -> str:
    lines = [f"listen: 127.0.0.1:{port}"]
    if name:
        lines.append(f"server_name: {name}")
    sync = "\n  sync_interval: always" if sync_always else ""
    lines.append(f'jetstream {{\n  store_dir: "{store}"{sync}\n}}')
    if cluster_port:
        route_list = ", ".join(f"nats-route://127.0.0.1:{p}" for p in routes)
        lines.append(f"cluster {{\n  name: bench\n  listen: 127.0.0.1:{cluster_port}\n"
                     f"  routes: [{route_list}]\n}}")
    return "\n".join(lines) + "\n"


def supports_sync_always() -> bool:
    """Whether this nats-server knows `sync_interval` (added in 2.10)."""
    with tempfile.TemporaryDirectory(prefix="bench-peers-nats-") as tmp:
        conf = Path(tmp) / "check.conf"
        conf.write_text(_config(Path(tmp) / "js", free_ports(1)[0], True))
        try:
            return subprocess.run([SERVER, "-c", str(conf), "-t"], capture_output=True,
                                  timeout=30).returncode == 0
        except (OSError, subprocess.SubprocessError):
            return False


@contextlib.contextmanager
def open_target(cls: str, work: Path) -> Iterator[Target]:
    size = CLUSTER_SIZE if cls == "c" else 1
    ports = free_ports(2 * size)
    client_ports, cluster_ports = ports[:size], ports[size:]
    with contextlib.ExitStack() as stack:  # closes the target, then stops the servers
        servers: list[ServerProcess] = []
        for i in range(size):
            name = f"jetstream-{cls}-{i}"
            conf = work / f"{name}.conf"
            conf.write_text(_config(
                work / name, client_ports[i], cls == "b", name=name if size > 1 else "",
                cluster_port=cluster_ports[i] if size > 1 else 0,
                routes=[p for j, p in enumerate(cluster_ports) if j != i]))
            servers.append(stack.enter_context(ServerProcess(
                name, [SERVER, "-c", str(conf)], work / f"{name}.log")))
        for server, port in zip(servers, client_ports, strict=True):
            server.wait_port(port)
        yield stack.enter_context(contextlib.closing(JetStreamTarget(
            [f"nats://127.0.0.1:{p}" for p in client_ports], size)))


def peer() -> Peer:
    missing = missing_programs(SERVER) or missing_module("nats", "nats-py")
    not_applicable = {}
    version = ""
    if missing is None:
        version = program_version([SERVER, "--version"])
        if not supports_sync_always():
            not_applicable["b"] = (f"{version or SERVER} lacks sync_interval "
                                   "(fsync per write: 2.10+)")
    return Peer(name="jetstream", missing=missing, settings=SETTINGS, open=open_target,
                not_applicable=not_applicable, version=version)
