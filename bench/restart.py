"""A SYNC_MASTER's return after kill -9: `python -m bench.restart [--rounds 10] [--down 8]`.

Real processes on loopback: a name server, a SYNC_MASTER + SYNC_FLUSH master and its slave
(1 MiB commitlog files, fixed ports as `mqcluster up` gives them, the slave finding its
master by haMasterAddress), and `--producers` sync producers (mqclient, in this process)
sending without pause. Each round kills the master with SIGKILL, restarts it `--down`
seconds later, and prints, in seconds after the restart (the new process's start):
- boot: the master serving (its "serving on" log line): the reference, measured in the
  same run, that the rest cannot beat;
- listed: the name server has the master again ("new broker registered");
- slave: the slave's HA link up again ("HA connected to master");
- route: the last producer whose cached route had lost the master has it again ("-":
  no producer's route lost it);
- reply: the first answer of the restarted master to a producer (any status);
- ok: the first SEND_OK;
- sna: SLAVE_NOT_AVAILABLE answers after the restart; failed: sends that failed from the
  kill to the first SEND_OK (the producers do not pause); lost: acknowledged messages of the
  round that the master does not hold at the end.
Log times (all processes log the wall clock) and the producers' answers are on one clock.
Then the medians, and the load average. The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import itertools
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import grpc

from mqclient import Message, MQClientError, Producer
from mqclient.cli.local_cluster import free_ports
from mqproto import admin_pb2, admin_pb2_grpc, common_pb2, messaging_pb2, messaging_pb2_grpc

REPO_ROOT = Path(__file__).resolve().parents[1]
TOPIC = "RestartBench"
QUEUES = 4
BROKER_NAME = "broker-a"
FILE_SIZE = 1024 * 1024
BOOT_TIMEOUT_S = 30.0
RECOVERY_TIMEOUT_S = 30.0
RPC_TIMEOUT_S = 10.0
STORED = frozenset({"SEND_OK", "SLAVE_NOT_AVAILABLE", "FLUSH_SLAVE_TIMEOUT",
                    "FLUSH_DISK_TIMEOUT"})
LOG_TIME_FORMAT = "%Y-%m-%d %H:%M:%S,%f"


# -- processes ---------------------------------------------------------------------------------
class Node:
    """One `python -m nameserver` or `python -m broker` child, logging (with wall-clock
    times) to its own file; stopped by its own handle."""

    def __init__(self, root: Path, name: str, argv: list[str]) -> None:
        self.name = name
        self.argv = argv
        self.log_path = root / f"{name}.log"
        self.process: subprocess.Popen[bytes] | None = None
        self.started = 0.0

    def start(self) -> None:
        env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
        with self.log_path.open("ab") as log:
            self.started = time.time()
            self.process = subprocess.Popen([sys.executable, *self.argv], cwd=REPO_ROOT, env=env,
                                            stdout=log, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL)

    def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=30)

    def stop(self) -> None:
        p = self.process
        if p is None or p.poll() is not None:
            return
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()

    def first_line_after(self, since: float, text: str, timeout: float = 0.0) -> float | None:
        """The wall time of the first log line containing `text` logged at or after `since`
        (log times have millisecond resolution), waiting up to `timeout`."""
        deadline = time.monotonic() + timeout
        while True:
            for line in self.log_path.read_text(errors="replace").splitlines():
                if text in line:
                    at = log_time(line)
                    if at is not None and at >= since - 0.001:
                        return at
            if time.monotonic() >= deadline:
                return None
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(f"{self.name} exited:\n{self.log_path.read_text()[-3000:]}")
            time.sleep(0.05)


def log_time(line: str) -> float | None:
    try:
        return datetime.datetime.strptime(line[:23], LOG_TIME_FORMAT).timestamp()
    except ValueError:
        return None


def write_conf(path: Path, props: dict[str, object]) -> Path:
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    return path


class Cluster:
    """The name server, the master and its slave, on ports fixed for the whole run."""

    def __init__(self, root: Path, slave_props: dict[str, object] | None = None) -> None:
        ns_port, m_port, m_ha, s_port, s_ha = free_ports(5)
        self.namesrv_addr = f"127.0.0.1:{ns_port}"
        self.master_addr = f"127.0.0.1:{m_port}"
        common = {"brokerClusterName": "BenchCluster", "brokerName": BROKER_NAME,
                  "namesrvAddr": self.namesrv_addr, "bindAddress": "127.0.0.1",
                  "brokerIP1": "127.0.0.1", "sendListenPort": 0, "grpcProxyPort": 0,
                  "remotingPort": 0,
                  "flushDiskType": "SYNC_FLUSH", "mappedFileSizeCommitLog": FILE_SIZE,
                  "autoCreateTopicEnable": "true"}
        master_conf = write_conf(root / "master.conf", {
            **common, "brokerId": 0, "brokerRole": "SYNC_MASTER", "listenPort": m_port,
            "haListenPort": m_ha, "storePathRootDir": root / "master"})
        slave_conf = write_conf(root / "slave.conf", {
            **common, "brokerId": 1, "brokerRole": "SLAVE", "listenPort": s_port,
            "haListenPort": s_ha, "storePathRootDir": root / "slave",
            "haMasterAddress": f"127.0.0.1:{m_ha}", **(slave_props or {})})
        self.namesrv = Node(root, "namesrv", ["-m", "nameserver", "--listen",
                                              self.namesrv_addr])
        self.master = Node(root, "master", ["-m", "broker", "-c", str(master_conf)])
        self.slave = Node(root, "slave", ["-m", "broker", "-c", str(slave_conf)])
        self.nodes = [self.namesrv, self.master, self.slave]

    def start(self) -> None:
        self.namesrv.start()
        self.namesrv.first_line_after(0, "name server listening", BOOT_TIMEOUT_S)
        for node in (self.master, self.slave):
            node.start()
            if node.first_line_after(node.started, "serving on", BOOT_TIMEOUT_S) is None:
                raise RuntimeError(f"{node.name} did not boot:\n{node.log_path.read_text()}")
        with grpc.insecure_channel(self.master_addr) as channel:
            r = admin_pb2_grpc.AdminServiceStub(channel).CreateOrUpdateTopic(
                admin_pb2.CreateOrUpdateTopicRequest(topic_config=common_pb2.TopicConfig(
                    topic_name=TOPIC, read_queue_nums=QUEUES, write_queue_nums=QUEUES,
                    perm=6)), timeout=RPC_TIMEOUT_S)
        if r.status.code != common_pb2.SUCCESS:
            raise RuntimeError(f"topic not created: {r.status}")

    def stop(self) -> None:
        for node in reversed(self.nodes):
            node.stop()

    def in_sync(self) -> bool:
        with grpc.insecure_channel(self.master_addr) as channel:
            try:
                r = admin_pb2_grpc.AdminServiceStub(channel).GetHAStatus(
                    admin_pb2.GetHAStatusRequest(), timeout=RPC_TIMEOUT_S)
            except grpc.RpcError:
                return False
        return r.in_sync_slave_nums >= 1

    def master_bodies(self) -> set[bytes]:
        """Every message body the master holds in the topic."""
        return held_bodies(self.master_addr, TOPIC, QUEUES)


# -- producers ---------------------------------------------------------------------------------

def held_bodies(addr: str, topic: str, queues: int) -> set[bytes]:
    """Every message body the broker at `addr` holds in `topic`'s first `queues` queues."""
    bodies: set[bytes] = set()
    with grpc.insecure_channel(addr) as channel:
        stub = messaging_pb2_grpc.MessagingServiceStub(channel)
        for queue in range(queues):
            offset = 0
            while True:
                r = stub.PullMessage(messaging_pb2.PullMessageRequest(
                    consumer_group="TOOLS_CONSUMER", topic=topic, queue_id=queue,
                    queue_offset=offset, max_msg_nums=32, subscription="*"),
                    timeout=RPC_TIMEOUT_S)
                if r.status.code not in (common_pb2.SUCCESS, common_pb2.NO_MATCHED_MSG):
                    break
                bodies.update(m.body for m in r.messages)
                if r.next_begin_offset <= offset:
                    break
                offset = r.next_begin_offset
    return bodies

@dataclasses.dataclass(slots=True)
class Answer:
    ended: float  # wall clock
    status: str  # a SendStatus value, or the MQClientError code
    body: bytes


class Producers:
    """Sync producers sending back to back, each on its own thread; every answer kept."""

    def __init__(self, namesrv_addr: str, count: int, error_pause_s: float) -> None:
        self.producers = [Producer(f"bench-restart-{i}", namesrv_addr).start()
                          for i in range(count)]
        self.error_pause_s = error_pause_s
        self.answers: list[Answer] = []  # appended by every thread (atomic under the GIL)
        self.stopping = threading.Event()
        self.threads = [threading.Thread(target=self._run, args=(i, p), daemon=True,
                                         name=f"bench-producer-{i}")
                        for i, p in enumerate(self.producers)]
        self.route_lost: dict[int, float] = {}  # producer -> when its route lost the master
        self.route_back: dict[int, float] = {}
        self._watch = threading.Thread(target=self._watch_routes, daemon=True)

    def start(self) -> None:
        for t in self.threads:
            t.start()
        self._watch.start()

    def _run(self, index: int, producer: Producer) -> None:
        for n in itertools.count():
            if self.stopping.is_set():
                return
            body = b"p%d-%08d" % (index, n)
            try:
                status = producer.send(Message(TOPIC, body)).status.value
            except MQClientError as e:
                status = e.code
            self.answers.append(Answer(time.time(), status, body))
            if status not in STORED and self.error_pause_s:
                time.sleep(self.error_pause_s)

    def has_master(self, index: int) -> bool:
        route = self.producers[index].instance.routes.get(TOPIC)
        group = route.brokers.get(BROKER_NAME) if route is not None else None
        return group is not None and group.master_addr is not None

    def _watch_routes(self) -> None:
        """Polls the producers' cached routes (dict reads: cheap) every 5 ms."""
        had = [True] * len(self.producers)
        while not self.stopping.wait(0.005):
            for i in range(len(self.producers)):
                has = self.has_master(i)
                if has != had[i]:
                    (self.route_back if has else self.route_lost)[i] = time.time()
                    had[i] = has

    def stop(self) -> None:
        self.stopping.set()
        for t in [*self.threads, self._watch]:
            t.join(timeout=30)
        for p in self.producers:
            p.shutdown()


# -- rounds ------------------------------------------------------------------------------------
@dataclasses.dataclass
class Round:
    boot: float | None
    listed: float | None
    slave: float | None
    route: float | None
    reply: float | None
    ok: float | None
    sna: int
    failed: dict[str, int]  # failed sends from the kill to the first SEND_OK, by error code
    lost: int = 0
    route_lost: int = 0  # producers whose route lost the master


def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.01)


def first_answer(answers: list[Answer], start: int, since: float,
                 accept: Callable[[str], bool]) -> float | None:
    for a in itertools.islice(answers, start, None):
        if a.ended >= since and accept(a.status):
            return a.ended
    return None


def run_round(cluster: Cluster, producers: Producers, down_s: float, settle_s: float) -> Round:
    answers = producers.answers
    mark = len(answers)
    wait_for(lambda: first_answer(answers, mark, 0, "SEND_OK".__eq__) is not None,
             RECOVERY_TIMEOUT_S, "a SEND_OK before the kill")
    time.sleep(settle_s)  # replicated sends for a while, then the kill
    producers.route_lost.clear()
    producers.route_back.clear()
    killed = len(answers)
    cluster.master.kill()
    time.sleep(down_s)
    mark = len(answers)
    cluster.master.start()
    t0 = cluster.master.started
    wait_for(lambda: first_answer(answers, mark, t0, "SEND_OK".__eq__) is not None,
             RECOVERY_TIMEOUT_S, "the first SEND_OK after the restart")
    time.sleep(settle_s)
    ok = first_answer(answers, mark, t0, "SEND_OK".__eq__)
    reply = first_answer(answers, mark, t0, STORED.__contains__)
    sna = sum(1 for a in itertools.islice(answers, mark, None)
              if a.ended >= t0 and a.status == "SLAVE_NOT_AVAILABLE")
    master, slave, namesrv = cluster.master, cluster.slave, cluster.namesrv
    back = [producers.route_back.get(i) for i in producers.route_lost]
    failed: dict[str, int] = {}
    for a in itertools.islice(answers, killed, None):
        if a.ended > (ok or 0):
            break
        if a.status not in STORED:
            failed[a.status] = failed.get(a.status, 0) + 1

    def since(at: float | None) -> float | None:
        return None if at is None else round(at - t0, 3)

    return Round(
        boot=since(master.first_line_after(t0, "serving on", 5.0)),
        listed=since(namesrv.first_line_after(t0, f"new broker registered, {cluster.master_addr}",
                                              5.0)),
        slave=since(slave.first_line_after(t0, "HA connected to master", 5.0)),
        route=since(max(back)) if back and None not in back else None,
        reply=since(reply), ok=since(ok), sna=sna, failed=failed, route_lost=len(back))


def count_lost(cluster: Cluster, answers: list[Answer], bounds: list[int]) -> list[int]:
    """Per round: stored answers whose body the master does not hold."""
    held = cluster.master_bodies()
    lost = [0] * len(bounds)
    for i, (start, end) in enumerate(itertools.pairwise([*bounds, len(answers)])):
        lost[i] = sum(1 for a in answers[start:end] if a.status in STORED and a.body not in held)
    return lost


def run(root: Path, rounds: int, down_s: float, producer_count: int, error_pause_s: float,
        settle_s: float = 1.0, out: Callable[[str], None] = print) -> dict[str, object]:
    cluster = Cluster(root)
    producers: Producers | None = None
    results: list[Round] = []
    load_before = os.getloadavg()
    try:
        cluster.start()
        wait_for(cluster.in_sync, BOOT_TIMEOUT_S, "the slave in sync")
        producers = Producers(cluster.namesrv_addr, producer_count, error_pause_s)
        producers.start()
        bounds = []
        out(f"{'round':>5} {'boot':>6} {'listed':>6} {'slave':>6} {'route':>6} {'reply':>6} "
            f"{'ok':>6} {'sna':>5} {'failed':>7}")
        for n in range(rounds):
            bounds.append(len(producers.answers))
            r = run_round(cluster, producers, down_s, settle_s)
            results.append(r)
            out(f"{n + 1:>5} {_fmt(r.boot)} {_fmt(r.listed)} {_fmt(r.slave)} {_fmt(r.route)} "
                f"{_fmt(r.reply)} {_fmt(r.ok)} {r.sna:>5} {sum(r.failed.values()):>7}"
                + (f"  ({r.route_lost} routes lost the master)" if r.route_lost else ""))
        producers.stop()
        wait_for(cluster.in_sync, RECOVERY_TIMEOUT_S, "the slave in sync at the end")
        for r, lost in zip(results, count_lost(cluster, producers.answers, bounds),
                           strict=True):
            r.lost = lost
        answers = producers.answers
    finally:
        if producers is not None:
            producers.stop()
        cluster.stop()
    summary: dict[str, object] = {
        "rounds": rounds, "down_s": down_s, "producers": producer_count,
        **{f"median_{k}_s": _median([getattr(r, k) for r in results])
           for k in ("boot", "listed", "slave", "reply", "ok")},
        "median_sna": statistics.median(r.sna for r in results),
        "max_ok_s": max((r.ok for r in results if r.ok is not None), default=None),
        "max_sna": max(r.sna for r in results),
        "lost": sum(r.lost for r in results),
        "stored": sum(1 for a in answers if a.status in STORED),
        "loadavg_before": [round(x, 2) for x in load_before],
        "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        "per_round": [dataclasses.asdict(r) for r in results],
    }
    out(f"median: boot {summary['median_boot_s']} s, slave {summary['median_slave_s']} s, "
        f"first SEND_OK {summary['median_ok_s']} s (max {summary['max_ok_s']}), "
        f"SLAVE_NOT_AVAILABLE {summary['median_sna']} (max {summary['max_sna']}), "
        f"lost {summary['lost']} of {summary['stored']} stored; "
        f"load {summary['loadavg_before']} -> {summary['loadavg_after']}")
    return summary


def _fmt(value: float | None) -> str:
    return f"{value:>6.2f}" if value is not None else f"{'-':>6}"


def _median(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return round(statistics.median(known), 3) if known else None


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.restart", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=10, help="kill/restart rounds (10)")
    parser.add_argument("--down", type=float, default=8.0,
                        help="seconds between the kill and the restart (8)")
    parser.add_argument("--producers", type=int, default=4, help="sync producers (4)")
    parser.add_argument("--error-pause", type=float, default=0.0,
                        help="seconds a producer waits after a failed send (0)")
    parser.add_argument("--dir", default=None, help="where stores and logs go (a temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the stores and logs")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-restart-", dir=args.dir))
    try:
        summary = run(root, args.rounds, args.down, args.producers, args.error_pause)
    finally:
        if args.keep:
            print(f"logs and stores kept in {root}", file=sys.stderr)
        else:
            shutil.rmtree(root, ignore_errors=True)
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
