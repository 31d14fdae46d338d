"""Automatic failover in controller mode: `python -m bench.failover [--rounds 5]`.

`--pause`: every other round pauses the master (SIGSTOP) past the heartbeat timeout instead,
then resumes it (SIGCONT): it finds itself demoted with a tail the new master lacks and
restarts in place to cut it.

Real processes on loopback: one etcd member, a controller (`python -m controller`), a name
server and one broker group of three brokers in controller mode (brokerRole=SYNC_MASTER,
fixed ports), and `--producers` sync producers (mqclient, in this process) sending without
pause. Each round waits until the master has a slave in its SyncStateSet, kills the master
with SIGKILL and prints, in seconds after the kill:
- elected: the controller's log line naming the new master;
- master: the new master's "this broker is master" line;
- ok: the first SEND_OK after the kill (the switch time clients see);
then restarts the killed broker and waits until it is back in the SyncStateSet (it rejoined
as a slave, after cutting what it never replicated: `rejoin`, seconds after its restart).
At the end: acknowledged (SEND_OK) messages the last master does not hold (`lost`: must be
0). The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import itertools
import json
import os
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc

from bench.restart import (
    BOOT_TIMEOUT_S,
    BROKER_NAME,
    QUEUES,
    RPC_TIMEOUT_S,
    TOPIC,
    Node,
    Producers,
    first_answer,
    held_bodies,
    wait_for,
    write_conf,
)
from controller import protocol as cp
from controller.client import ControllerClient, ControllerUnavailable
from controller.etcd_process import EtcdCluster
from mqclient.cli.local_cluster import free_ports
from mqproto import admin_pb2, admin_pb2_grpc, common_pb2

SWITCH_TIMEOUT_S = 30.0
FILE_SIZE = 1024 * 1024


def _ask(controller_addr: str, method: str, request: dict[str, Any]) -> dict[str, Any]:
    async def call() -> dict[str, Any]:
        client = ControllerClient([controller_addr], timeout_s=2.0)
        try:
            return await client.call(method, request)
        finally:
            await client.close()
    return asyncio.run(call())


class FailoverCluster:
    """etcd, a controller, a name server and brokers 1..n of broker-a in controller mode."""

    def __init__(self, root: Path, brokers: int = 3, heartbeat_timeout_ms: int = 1500,
                 extra_props: dict[str, object] | None = None) -> None:
        self.root = root
        self.etcd = EtcdCluster(root / "etcd", 1, ports=free_ports(2))
        ports = free_ports(2 + 2 * brokers)
        self.controller_addr = f"127.0.0.1:{ports[0]}"
        self.namesrv_addr = f"127.0.0.1:{ports[1]}"
        self.controller = Node(root, "controller", [
            "-m", "controller", "--etcd", self.etcd.endpoints_text, "--listen",
            self.controller_addr, "--heartbeat-timeout-ms", str(heartbeat_timeout_ms)])
        self.namesrv = Node(root, "namesrv", ["-m", "nameserver", "--listen",
                                              self.namesrv_addr])
        self.brokers: dict[int, Node] = {}
        self.addrs: dict[int, str] = {}
        for i in range(1, brokers + 1):
            port, ha = ports[2 * i], ports[2 * i + 1]
            self.addrs[i] = f"127.0.0.1:{port}"
            conf = write_conf(root / f"broker-{i}.conf", {
                "brokerClusterName": "FailoverCluster", "brokerName": BROKER_NAME,
                "brokerId": i, "brokerRole": "SYNC_MASTER", "enableControllerMode": "true",
                "controllerAddr": self.controller_addr, "namesrvAddr": self.namesrv_addr,
                "bindAddress": "127.0.0.1", "brokerIP1": "127.0.0.1", "listenPort": port,
                "haListenPort": ha, "sendListenPort": 0, "grpcProxyPort": 0,
                "mappedFileSizeCommitLog": FILE_SIZE, "autoCreateTopicEnable": "false",
                "storePathRootDir": root / f"broker-{i}", **(extra_props or {})})
            self.brokers[i] = Node(root, f"broker-{i}", ["-m", "broker", "-c", str(conf)])

    def start(self) -> None:
        self.etcd.start()
        self.controller.start()
        self.controller.first_line_after(0, "leads (term", BOOT_TIMEOUT_S)
        self.namesrv.start()
        self.namesrv.first_line_after(0, "name server listening", BOOT_TIMEOUT_S)
        for node in self.brokers.values():
            node.start()
        for node in self.brokers.values():
            if node.first_line_after(node.started, "serving on", BOOT_TIMEOUT_S) is None:
                raise RuntimeError(f"{node.name} did not boot:\n{node.log_path.read_text()}")
        wait_for(lambda: self.master_id() is not None, BOOT_TIMEOUT_S, "a master elected")
        master = self.master_id()
        assert master is not None
        with grpc.insecure_channel(self.addrs[master]) as channel:
            r = admin_pb2_grpc.AdminServiceStub(channel).CreateOrUpdateTopic(
                admin_pb2.CreateOrUpdateTopicRequest(topic_config=common_pb2.TopicConfig(
                    topic_name=TOPIC, read_queue_nums=QUEUES, write_queue_nums=QUEUES,
                    perm=6)), timeout=RPC_TIMEOUT_S)
        if r.status.code != common_pb2.SUCCESS:
            raise RuntimeError(f"topic not created: {r.status}")
        # Every replica has the topic (slaves copy topic configs when their link comes up
        # and every slaveSynchronizeInterval) before a master is killed.
        wait_for(lambda: all(self.has_topic(i) for i in self.brokers), BOOT_TIMEOUT_S,
                 "the topic on every broker")

    def stop(self) -> None:
        for node in [*self.brokers.values(), self.namesrv, self.controller]:
            node.stop()
        self.etcd.stop()

    def replica_info(self) -> dict[str, Any]:
        try:
            return _ask(self.controller_addr, cp.GET_REPLICA_INFO, {"brokerName": BROKER_NAME})
        except (ControllerUnavailable, Exception):
            return {}

    def master_id(self) -> int | None:
        master = self.replica_info().get("masterId")
        return int(master) if master is not None else None

    def sync_state_set(self) -> list[int]:
        return list(self.replica_info().get("syncStateSet") or [])

    def has_topic(self, broker_id: int) -> bool:
        try:
            with grpc.insecure_channel(self.addrs[broker_id]) as channel:
                r = admin_pb2_grpc.AdminServiceStub(channel).GetTopicList(
                    admin_pb2.GetTopicListRequest(), timeout=RPC_TIMEOUT_S)
        except grpc.RpcError:
            return False
        return any(t.topic_name == TOPIC for t in r.topic_configs)

    def bodies(self, broker_id: int) -> set[bytes]:
        """Every message body broker `broker_id` holds in the topic."""
        return held_bodies(self.addrs[broker_id], TOPIC, QUEUES)


@dataclasses.dataclass
class Round:
    killed: int
    fault: str = "kill"
    new_master: int | None = None
    elected: float | None = None
    master: float | None = None
    ok: float | None = None
    rejoin: float | None = None
    failed: int = 0


def run_round(cluster: FailoverCluster, producers: Producers, settle_s: float,
              fault: str = "kill") -> Round:
    answers = producers.answers
    wait_for(lambda: len(cluster.sync_state_set()) >= 2, SWITCH_TIMEOUT_S,
             "a slave in the SyncStateSet")
    mark = len(answers)
    wait_for(lambda: first_answer(answers, mark, 0, "SEND_OK".__eq__) is not None,
             SWITCH_TIMEOUT_S, "a SEND_OK before the kill")
    time.sleep(settle_s)
    killed_id = cluster.master_id()
    assert killed_id is not None
    node = cluster.brokers[killed_id]
    t0 = time.time()
    if fault == "pause":  # SIGSTOP: it stays silent, then comes back still thinking it leads
        assert node.process is not None
        node.process.send_signal(signal.SIGSTOP)
    else:
        node.kill()  # returns once the process is gone: later answers are not from it
    mark = len(answers)
    wait_for(lambda: cluster.master_id() not in (None, killed_id), SWITCH_TIMEOUT_S,
             "a new master")
    wait_for(lambda: first_answer(answers, mark, t0, "SEND_OK".__eq__) is not None,
             SWITCH_TIMEOUT_S, "the first SEND_OK after the kill")
    r = Round(killed_id, fault=fault)
    ok = first_answer(answers, mark, t0, "SEND_OK".__eq__)
    r.ok = round(ok - t0, 3) if ok is not None else None
    r.failed = sum(1 for a in itertools.islice(answers, mark, None)
                   if a.ended <= (ok or 0) and a.status != "SEND_OK")
    r.new_master = cluster.master_id()
    at = cluster.controller.first_line_after(t0, "master is now", 5.0)
    r.elected = round(at - t0, 3) if at is not None else None
    if r.new_master is not None:
        at = cluster.brokers[r.new_master].first_line_after(t0, "this broker is master", 5.0)
        r.master = round(at - t0, 3) if at is not None else None
    if fault == "pause":
        assert node.process is not None
        back = time.time()
        node.process.send_signal(signal.SIGCONT)  # it restarts itself in place, cut
    else:
        node.start()
        back = node.started
    wait_for(lambda: killed_id in cluster.sync_state_set(), SWITCH_TIMEOUT_S,
             f"broker {killed_id} back in the SyncStateSet")
    r.rejoin = round(time.time() - back, 3)
    time.sleep(settle_s)
    return r


def run(root: Path, rounds: int, producer_count: int, settle_s: float = 1.0,
        out: Callable[[str], None] = print, all_ack: bool = False,
        faults: tuple[str, ...] = ("kill",)) -> dict[str, Any]:
    """`faults`, in turn per round: kill (SIGKILL, then a restart) or pause (SIGSTOP past
    the heartbeat timeout, then SIGCONT)."""
    cluster = FailoverCluster(root, extra_props={"allAckInSyncStateSet": "true"}
                              if all_ack else None)
    producers: Producers | None = None
    results: list[Round] = []
    try:
        cluster.start()
        producers = Producers(cluster.namesrv_addr, producer_count, error_pause_s=0.01)
        producers.start()
        out(f"{'round':>5} {'fault':>5} {'killed':>6} {'new':>4} {'elected':>8} {'master':>7} "
            f"{'ok':>6} {'failed':>7} {'rejoin':>7}")
        for n in range(rounds):
            r = run_round(cluster, producers, settle_s, faults[n % len(faults)])
            results.append(r)
            out(f"{n + 1:>5} {r.fault:>5} {r.killed:>6} {r.new_master!s:>4} {_fmt(r.elected, 8)} "
                f"{_fmt(r.master, 7)} {_fmt(r.ok, 6)} {r.failed:>7} {_fmt(r.rejoin, 7)}")
        producers.stop()
        master = cluster.master_id()
        assert master is not None
        held = cluster.bodies(master)
        acked = [a.body for a in producers.answers if a.status == "SEND_OK"]
        lost = sum(1 for b in acked if b not in held)
    finally:
        if producers is not None:
            producers.stop()
        cluster.stop()
    oks = [r.ok for r in results if r.ok is not None]
    summary: dict[str, Any] = {
        "rounds": rounds, "producers": producer_count, "all_ack": all_ack,
        "median_ok_s": round(statistics.median(oks), 3) if oks else None,
        "max_ok_s": max(oks, default=None),
        "median_elected_s": _median([r.elected for r in results]),
        "lost": lost, "acked": len(acked),
        "per_round": [dataclasses.asdict(r) for r in results],
    }
    out(f"kill -9 of the master to the first SEND_OK: median {summary['median_ok_s']} s, "
        f"max {summary['max_ok_s']} s; election median {summary['median_elected_s']} s; "
        f"lost {lost} of {len(acked)} acknowledged")
    return summary


def _fmt(value: float | None, width: int) -> str:
    return f"{value:>{width}.2f}" if value is not None else f"{'-':>{width}}"


def _median(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return round(statistics.median(known), 3) if known else None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.failover", description=__doc__.split(
        "\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--producers", type=int, default=4)
    ap.add_argument("--dir", type=Path, default=None, help="keep the run's files here")
    ap.add_argument("--pause", action="store_true",
                    help="every other round pauses the master (SIGSTOP) instead of killing it")
    ap.add_argument("--all-ack", action="store_true",
                    help="allAckInSyncStateSet=true: every member acks each send")
    args = ap.parse_args(argv)
    if args.rounds < 1 or args.producers < 1:
        ap.error("--rounds and --producers must be >= 1")
    with tempfile.TemporaryDirectory(prefix="bench-failover-") as tmp:
        root = args.dir or Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        summary = run(root, args.rounds, args.producers, all_ack=args.all_ack,
                      faults=("kill", "pause") if args.pause else ("kill",))
    print(json.dumps(summary))
    return 0 if summary["lost"] == 0 else 1


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
