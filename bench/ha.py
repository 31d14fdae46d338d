"""HA benchmark: `python -m bench.ha [--replication-mb N] [--seconds S] [--latency-sends N]`.

Real broker processes (`python -m broker`) on loopback, a master and a slave that finds
its master by `haMasterAddress` (no name server), both ASYNC_FLUSH. Measures:
- replication_mb_s: an empty slave catching up a master holding N MB (the time from the
  master seeing the slave's link to the slave's ack reaching the master's max offset);
- async_master_batch_msgs_s / sync_master_batch_msgs_s: batches of 32 x 1 KiB from
  concurrent senders for S seconds, the slave connected (roles alternate, best of
  --rounds each);
- sync_master_p50_ms / sync_master_p99_ms: one 1 KiB send at a time to a SYNC_MASTER.

The sending client is grpc.aio in this process, on the same machine as both brokers. The
last line is one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import select
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import grpc

from common.constants import BROKER_BOOT_SUCCESS_PREFIX
from mqproto import admin_pb2, admin_pb2_grpc, common_pb2, messaging_pb2, messaging_pb2_grpc

M = messaging_pb2
A = admin_pb2
REPO_ROOT = Path(__file__).resolve().parents[1]
TOPIC = "BenchHA"
QUEUES = 8
BODY = os.urandom(1024)
BATCH = 32
FILE_SIZE = 256 * 1024 * 1024
SETTLE_S = 3.0
BOOT_TIMEOUT_S = 30.0
RPC_TIMEOUT_S = 30.0


class BrokerProcess:
    """One `python -m broker` child; stopped by its own handle."""

    def __init__(self, root: Path, name: str, props: dict[str, str]) -> None:
        conf = root / f"{name}.conf"
        base = {"brokerClusterName": "BenchCluster", "brokerName": "bench-a",
                "listenPort": "0", "bindAddress": "127.0.0.1", "brokerIP1": "127.0.0.1",
                "storePathRootDir": str(root / name),
                "mappedFileSizeCommitLog": str(FILE_SIZE), "autoCreateTopicEnable": "true"}
        conf.write_text("".join(f"{k}={v}\n" for k, v in {**base, **props}.items()))
        self.log_path = root / f"{name}.log"
        env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
        with self.log_path.open("w") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "broker", "-c", str(conf), "--log-level", "WARNING"],
                cwd=REPO_ROOT, env=env, text=True, stdout=subprocess.PIPE, stderr=log,
                stdin=subprocess.DEVNULL)
        self.address = self._wait_boot()

    def _wait_boot(self) -> str:
        assert self.process.stdout is not None
        deadline = time.monotonic() + BOOT_TIMEOUT_S
        while (remaining := deadline - time.monotonic()) > 0:
            readable, _, _ = select.select([self.process.stdout], [], [], remaining)
            line = self.process.stdout.readline() if readable else ""
            if not line:
                break
            if line.startswith(BROKER_BOOT_SUCCESS_PREFIX):
                return line.split(", ", 1)[1].split("]", 1)[0]
        self.stop()
        raise RuntimeError(f"broker did not boot:\n{self.log_path.read_text()}")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()


class Client:
    def __init__(self, address: str) -> None:
        self.channel = grpc.aio.insecure_channel(address)
        self.messaging = messaging_pb2_grpc.MessagingServiceStub(self.channel)
        self.admin = admin_pb2_grpc.AdminServiceStub(self.channel)

    async def runtime(self) -> A.GetRuntimeInfoResponse:
        return await self.admin.GetRuntimeInfo(A.GetRuntimeInfoRequest(), timeout=RPC_TIMEOUT_S)

    async def ha_status(self) -> A.GetHAStatusResponse:
        return await self.admin.GetHAStatus(A.GetHAStatusRequest(), timeout=RPC_TIMEOUT_S)

    async def create_topic(self) -> None:
        r = await self.admin.CreateOrUpdateTopic(A.CreateOrUpdateTopicRequest(
            topic_config=common_pb2.TopicConfig(topic_name=TOPIC, read_queue_nums=QUEUES,
                                                write_queue_nums=QUEUES, perm=6)),
            timeout=RPC_TIMEOUT_S)
        assert r.status.code == common_pb2.SUCCESS, r.status

    async def send_batch(self, n: int, queue_id: int, body: bytes = BODY) -> int:
        r = await self.messaging.SendBatch(M.SendBatchRequest(
            producer_group="PG", topic=TOPIC, queue_id=queue_id,
            messages=[M.Message(topic=TOPIC, body=body)] * n), timeout=RPC_TIMEOUT_S)
        return r.status.code

    async def close(self) -> None:
        await self.channel.close()


async def wait_for(predicate: object, timeout: float, what: str, interval: float = 0.01
                   ) -> None:
    deadline = time.monotonic() + timeout
    while not await predicate():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        await asyncio.sleep(interval)


async def live_link(master: Client) -> A.HAConnectionRuntimeInfo | None:
    links = [c for c in (await master.ha_status()).ha_connection_info if c.state == "connected"]
    return links[0] if links else None


async def fill(master: Client, megabytes: int) -> int:
    """Writes about `megabytes` MB to the master with concurrent batches of 256 x 4 KiB."""
    body = os.urandom(4096)
    per_batch = 256
    batches = megabytes * 1_000_000 // (per_batch * len(body)) + 1
    sem = asyncio.Semaphore(4)

    async def one(i: int) -> None:
        async with sem:
            code = await master.send_batch(per_batch, i % QUEUES, body)
            assert code == common_pb2.SUCCESS, code

    await asyncio.gather(*(one(i) for i in range(batches)))
    return (await master.runtime()).commit_log_max_offset


async def bench_replication(root: Path, megabytes: int) -> tuple[float, float, int]:
    """(MB/s of the commitlog copy, s until the slave also dispatched, bytes copied)."""
    master_proc = BrokerProcess(root, "repl-master", {"brokerRole": "ASYNC_MASTER"})
    slave_proc: BrokerProcess | None = None
    master = Client(master_proc.address)
    try:
        await master.create_topic()
        total = await fill(master, megabytes)
        ha_addr = (await master.runtime()).table["haServerAddr"]
        slave_proc = BrokerProcess(root, "repl-slave", {
            "brokerRole": "SLAVE", "brokerId": "1", "haMasterAddress": ha_addr})
        slave = Client(slave_proc.address)
        # The link usually exists by the time the slave printed its boot line; the clock
        # starts at the first poll that sees it, so the copy is if anything overstated
        # in time (understated in speed).
        begin = time.monotonic()
        link = await live_link(master)
        while link is None or link.slave_ack_offset < total:
            await asyncio.sleep(0.005)
            link = await live_link(master)
            if link is None:
                begin = time.monotonic()
        copied_s = time.monotonic() - begin
        await wait_for(lambda: _dispatched(slave), 120, "dispatch on the slave", 0.05)
        dispatched_s = time.monotonic() - begin
        await slave.close()
        return total / 1e6 / copied_s, dispatched_s, total
    finally:
        await master.close()
        if slave_proc is not None:
            slave_proc.stop()
        master_proc.stop()
        shutil.rmtree(root / "repl-master", ignore_errors=True)
        shutil.rmtree(root / "repl-slave", ignore_errors=True)


async def _dispatched(node: Client) -> bool:
    return (await node.runtime()).dispatch_behind_bytes == 0


async def start_pair(root: Path, role: str) -> tuple[BrokerProcess, BrokerProcess, Client]:
    master_proc = BrokerProcess(root, f"{role}-master", {"brokerRole": role})
    master = Client(master_proc.address)
    await master.create_topic()
    ha_addr = (await master.runtime()).table["haServerAddr"]
    slave_proc = BrokerProcess(root, f"{role}-slave", {
        "brokerRole": "SLAVE", "brokerId": "1", "haMasterAddress": ha_addr})

    async def in_sync() -> bool:
        return (await master.ha_status()).in_sync_slave_nums == 1

    await wait_for(in_sync, 30, "the slave in sync")
    # Both brokers zero-fill their next commitlog file in the background at start
    # (warmMappedFileEnable): let that finish before timing, it is not a send cost.
    await asyncio.sleep(SETTLE_S)
    return master_proc, slave_proc, master


async def batch_throughput(master: Client, seconds: float, senders: int) -> float:
    """Messages/s of batches of 32 x 1 KiB from `senders` concurrent senders."""
    sent = 0
    stop_at = time.monotonic() + seconds

    async def sender(k: int) -> None:
        nonlocal sent
        i = k
        while time.monotonic() < stop_at:
            code = await master.send_batch(BATCH, i % QUEUES)
            assert code == common_pb2.SUCCESS, common_pb2.ResponseCode.Name(code)
            sent += BATCH
            i += senders

    for k in range(senders):  # warm-up: one batch each
        await master.send_batch(BATCH, k % QUEUES)
    begin = time.monotonic()
    await asyncio.gather(*(sender(k) for k in range(senders)))
    return sent / (time.monotonic() - begin)


async def send_latencies(master: Client, n: int) -> list[float]:
    """Milliseconds of `n` single 1 KiB sends, one at a time."""
    out = []
    for i in range(n + 50):
        begin = time.perf_counter()
        r = await master.messaging.SendMessage(M.SendMessageRequest(
            producer_group="PG", message=M.Message(topic=TOPIC, body=BODY),
            queue_id=i % QUEUES), timeout=RPC_TIMEOUT_S)
        elapsed = (time.perf_counter() - begin) * 1000
        assert r.status.code == common_pb2.SUCCESS, r.status
        if i >= 50:  # the first sends warm up channels and caches
            out.append(elapsed)
    return out


async def bench_role(root: Path, role: str, seconds: float, senders: int,
                     latency_sends: int) -> dict[str, float]:
    master_proc, slave_proc, master = await start_pair(root, role)
    key = "sync_master" if role == "SYNC_MASTER" else "async_master"
    results: dict[str, float] = {}
    try:
        results[f"{key}_batch_msgs_s"] = await batch_throughput(master, seconds, senders)
        if latency_sends:
            lat = sorted(await send_latencies(master, latency_sends))
            results[f"{key}_p50_ms"] = statistics.median(lat)
            results[f"{key}_p99_ms"] = lat[min(len(lat) - 1, int(len(lat) * 0.99))]
            results[f"{key}_max_ms"] = lat[-1]
        link = await live_link(master)
        results[f"{key}_slave_in_sync"] = float(bool(link and link.in_sync))
    finally:
        await master.close()
        slave_proc.stop()
        master_proc.stop()
    return results


async def run(args: argparse.Namespace, root: Path) -> dict[str, float]:
    results: dict[str, float] = {}
    rate, dispatched_s, total = await bench_replication(root, args.replication_mb)
    results["replication_mb_s"] = rate
    results["replication_bytes"] = total
    results["replication_with_dispatch_s"] = dispatched_s
    print(f"replication: empty slave copied {total / 1e6:.0f} MB at {rate:.0f} MB/s "
          f"(dispatched after {dispatched_s:.2f} s)", flush=True)
    # The two roles alternate, `rounds` times each; the best throughput of each counts
    # (the machine is shared: a round can lose to a neighbour), latencies come from the
    # last SYNC_MASTER round.
    for round_no in range(args.rounds):
        last = round_no == args.rounds - 1
        for role, latency in (("ASYNC_MASTER", 0),
                              ("SYNC_MASTER", args.latency_sends if last else 0)):
            r = await bench_role(root, role, args.seconds, args.senders, latency)
            line = ", ".join(f"{k} {v:,.2f}" for k, v in r.items())
            print(f"{role} round {round_no + 1}: {line}", flush=True)
            for k, v in r.items():
                results[k] = max(v, results.get(k, v)) if k.endswith("_msgs_s") else v
    results["sync_vs_async_batch"] = (results["sync_master_batch_msgs_s"]
                                      / results["async_master_batch_msgs_s"])
    return results


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.ha", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--replication-mb", type=int, default=512,
                        help="MB on the master before the empty slave starts (default 512)")
    parser.add_argument("--seconds", type=float, default=5.0,
                        help="duration of each batch throughput run (default 5)")
    parser.add_argument("--senders", type=int, default=8,
                        help="concurrent batch senders (default 8)")
    parser.add_argument("--rounds", type=int, default=2,
                        help="batch throughput rounds per role, the best counts (default 2)")
    parser.add_argument("--latency-sends", type=int, default=2000,
                        help="single sends timed against the SYNC_MASTER (default 2000)")
    parser.add_argument("--dir", default=None, help="where the stores go (default: a temp dir)")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-ha-", dir=args.dir))
    try:
        results = asyncio.run(run(args, root))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(json.dumps({k: round(v, 3) for k, v in results.items()}))


if __name__ == "__main__":
    main()
