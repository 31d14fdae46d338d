"""RabbitMQ as a peer: one node (`rabbitmq-server` with its own epmd, both on loopback, all
state in the work directory), driven by aio-pika with publisher confirms. (a) a stream
(confirmed once written, not fsynced); (b) a quorum queue (confirmed after fsync); (c) not
run: a quorum queue replicates only to other RabbitMQ nodes, and this bench runs one."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
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

SERVER_SCRIPT = Path("/usr/lib/rabbitmq/bin/rabbitmq-server")  # Debian: not the su wrapper
PREFETCH = 1000
ACK_EVERY = 256
CONSUME_TIMEOUT_S = 300.0
QUEUE_TYPES = {"a": "stream", "b": "quorum"}
SETTINGS = {"a": "stream queue, publisher confirms (written, not fsynced)",
            "b": "quorum queue, publisher confirms (after fsync)"}
NOT_APPLICABLE = {"c": "a quorum queue replicates to other RabbitMQ nodes; this bench "
                       "starts one node"}


async def windowed(send: Callable[[int], Awaitable[object]], n: int, window: int,
                   stop_at: float) -> int:
    """send(0..n-1) with at most `window` awaiting their acknowledgement at once; no new
    send after `stop_at` (perf_counter). Returns how many were sent."""
    slots = asyncio.Semaphore(window)
    tasks = []

    async def one(i: int) -> None:
        try:
            await send(i)
        finally:
            slots.release()

    for i in range(n):
        await slots.acquire()
        if i % window == 0 and time.perf_counter() > stop_at:
            break
        tasks.append(asyncio.ensure_future(one(i)))
    await asyncio.gather(*tasks)
    return len(tasks)


class RabbitTarget:
    def __init__(self, port: int, queue_type: str) -> None:
        import aio_pika

        self.queue_type = queue_type
        self.runner = asyncio.Runner()
        self.connection: Any = self.runner.run(aio_pika.connect(
            f"amqp://guest:guest@127.0.0.1:{port}/", timeout=30))
        self.channel: Any = self.runner.run(self._open_channel())

    async def _open_channel(self) -> Any:
        return await self.connection.channel(publisher_confirms=True)

    def close(self) -> None:
        try:
            self.runner.run(self.connection.close())
        finally:
            self.runner.close()

    async def _publish(self, queue: str) -> None:
        import aio_pika

        await self.channel.default_exchange.publish(
            aio_pika.Message(BODY, delivery_mode=aio_pika.DeliveryMode.PERSISTENT),
            routing_key=queue, timeout=60)

    async def _declare(self, names: Sequence[str]) -> None:
        for name in names:
            await self.channel.declare_queue(name, durable=True,
                                             arguments={"x-queue-type": self.queue_type})

    def prepare(self, topics: Sequence[str]) -> None:
        self.runner.run(self._declare([TOPIC, *topics]))

    def one_at_a_time(self, n: int) -> tuple[float, float, float]:
        started = time.perf_counter()
        latencies = self.runner.run(one_by_one(lambda: self._publish(TOPIC), n))
        return summary(n, time.perf_counter() - started, latencies)

    def in_flight(self, topics: Sequence[str], n: int, window: int, seconds: float
                  ) -> tuple[int, float]:
        """Publishes with at most `window` confirms pending."""
        started = time.perf_counter()
        sent = self.runner.run(windowed(lambda i: self._publish(topics[i % len(topics)]), n,
                                        window, started + seconds))
        return sent, sent / (time.perf_counter() - started)

    async def _consume(self, total: int) -> None:
        channel = await self.connection.channel()
        await channel.set_qos(prefetch_count=PREFETCH)
        queue = await channel.get_queue(TOPIC, ensure=False)
        done = asyncio.Event()
        got = 0

        async def on_message(message: Any) -> None:
            nonlocal got
            got += 1
            if got % ACK_EVERY == 0 or got >= total:
                await message.ack(multiple=True)
            if got >= total:
                done.set()

        arguments = {"x-stream-offset": "first"} if self.queue_type == "stream" else None
        tag = await queue.consume(on_message, arguments=arguments)
        try:
            await asyncio.wait_for(done.wait(), CONSUME_TIMEOUT_S)
        finally:
            await queue.cancel(tag)
            await channel.close()

    def consume(self, total: int) -> float:
        """A consumer with a prefetch of PREFETCH, acknowledging every ACK_EVERY (multiple)."""
        started = time.perf_counter()
        self.runner.run(self._consume(total))
        return total / (time.perf_counter() - started)


@contextlib.contextmanager
def open_target(cls: str, work: Path) -> Iterator[Target]:
    base = work / f"rabbitmq-{cls}"
    (base / "home").mkdir(parents=True)
    epmd_port, amqp_port, dist_port = free_ports(3)
    conf = base / "rabbitmq.conf"
    conf.write_text(f"listeners.tcp.1 = 127.0.0.1:{amqp_port}\nloopback_users = none\n")
    (base / "enabled_plugins").write_text("[].\n")
    env = {"HOME": str(base / "home"), "ERL_EPMD_PORT": str(epmd_port),
           "ERL_EPMD_ADDRESS": "127.0.0.1",
           "RABBITMQ_NODENAME": f"benchpeers{os.getpid()}{cls}@localhost",
           "RABBITMQ_MNESIA_BASE": str(base / "mnesia"), "RABBITMQ_LOG_BASE": str(base / "log"),
           "RABBITMQ_LOGS": "-", "RABBITMQ_CONFIG_FILE": str(conf),
           "RABBITMQ_ENABLED_PLUGINS_FILE": str(base / "enabled_plugins"),
           "RABBITMQ_DIST_PORT": str(dist_port), "RABBITMQ_PID_FILE": str(base / "pid")}
    with contextlib.ExitStack() as stack:  # closes the target, then stops the servers
        epmd = stack.enter_context(ServerProcess(
            "epmd", ["epmd", "-port", str(epmd_port), "-address", "127.0.0.1"],
            base / "epmd.log", env=env))
        epmd.wait_port(epmd_port)
        script = str(SERVER_SCRIPT) if SERVER_SCRIPT.exists() else "rabbitmq-server"
        rabbit = stack.enter_context(ServerProcess(
            "rabbitmq-server", [script], base / "rabbitmq.log", env=env, cwd=base,
            pid_file=base / "pid"))
        rabbit.wait_port(amqp_port)
        yield stack.enter_context(contextlib.closing(RabbitTarget(amqp_port,
                                                                  QUEUE_TYPES[cls])))


def _version() -> str:
    out = program_version(["dpkg-query", "-W", "-f", "${Version}", "rabbitmq-server"])
    return f"rabbitmq-server {out}" if out else ""


def peer() -> Peer:
    missing = missing_programs("epmd")
    if not SERVER_SCRIPT.exists() and shutil.which("rabbitmq-server") is None:
        missing = "not installed: rabbitmq-server"
    missing = missing or missing_module("aio_pika", "aio-pika")
    return Peer(name="rabbitmq", missing=missing, settings=SETTINGS, open=open_target,
                not_applicable=NOT_APPLICABLE, version=_version() if missing is None else "")
