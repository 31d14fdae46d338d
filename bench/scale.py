"""Many topics and queues: `python -m bench.scale [--topics 1000,10000,50000]` (issue 18).

For each size, a name server and one ASYNC_FLUSH broker (real processes on free loopback
ports, a fresh store) and topics of 8 queues:
- topic create time (mqadmin's batch create, until the last topic's route is on the name
  server);
- one 1 KiB message into every queue (SEND_BATCHES frames on the send channel, a batch per
  queue), and how many queues hold data;
- broker RSS, open fds and memory maps;
- registration body (compressed and raw) and the name server's CPU per keep-alive
  registration and for a full one (one topic changed), with the longest answer time of a
  ping RPC to the broker and to the name server during that registration (`max_loop_stall_ms`:
  minus the pings' median before it: the loops' longest stall, as seen from outside), and
  the most CPU a process used during one of its logged stalls (`*_max_loop_stall_cpu_ms`:
  a stall of its own costs about its length in CPU; on a loaded machine a process that was
  not run stalls with little);
- route lookup p50 / p99 (GetRouteInfoByTopic) and a producer's batched route refresh of all
  topics (`route_refresh_s`, one round);
- broker restart (SIGTERM, start again) time and RSS after restart;
- sync and async send rates spread over 1,000 topics (and over all) against one topic, in
  the same run (the best of `--rounds` rounds each; `sync_spread_vs_one` is the median of
  16 alternating pairs of short one / spread blocks, steadier on a shared machine).

Progress lines go to stdout as it runs; the last line is one JSON object for the largest
size (with every size's figures under `sizes`). The broker's store layout and fd use are
the store's (issue 18's store part): before that lands, large sizes fail with EMFILE.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc

from bench.e2e import _spawn, percentile, start_namesrv, stop, write_broker_conf
from broker.register_body import encode_topic_table
from broker.topic_config import TopicConfig
from common.constants import BROKER_BOOT_SUCCESS_PREFIX
from mqclient import Message, Producer
from mqclient.admin import MQAdmin
from mqclient.loop import CHANNEL_OPTIONS
from mqclient.send_channel import BlockingSendConnections
from mqproto import (
    admin_pb2,
    admin_pb2_grpc,
    common_pb2,
    messaging_pb2,
    messaging_pb2_grpc,
    namesrv_pb2,
    namesrv_pb2_grpc,
)
from remoting.framing import KIND_SEND_BATCHES, encode_batch_message
from remoting.serving import LOOP_STALL_ENV

BODY = os.urandom(1024)
QUEUES = 8
SPREAD_TOPICS = 1000
FILL_BATCHES_PER_FRAME = 256
FILL_DISPATCH_TIMEOUT_S = 3600.0
STALL_LINE = re.compile(r"event loop stalled ([0-9.]+) ms")
STALL_CPU = re.compile(r"event loop stalled [0-9.]+ ms \(CPU meanwhile: loop thread [0-9.]+ ms, "
                       r"process ([0-9.]+) ms\)")
# Both processes log each event-loop stall longer than this (remoting.serving).
STALL_LOG_MS = 5


def progress(text: str) -> None:
    print(f"[scale] {text}", flush=True)


def topic_names(n: int) -> list[str]:
    return [f"ScaleTopic{i:06d}" for i in range(n)]


# -- processes ---------------------------------------------------------------------------------
class ScaleCluster:
    """A name server and one broker; the broker can be restarted on its store."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.namesrv_process, self.namesrv = start_namesrv(work)
        self.conf = write_broker_conf(work, self.namesrv, {
            "brokerClusterName": "ScaleCluster", "autoCreateTopicEnable": "false"})
        self.broker_process: subprocess.Popen[str] | None = None
        self.broker = ""
        self.broker_log = work / "broker.log"
        self.boots = 0
        self.start_broker()

    def start_broker(self) -> float:
        started = time.monotonic()
        self.boots += 1
        if self.boots > 1:  # a restart logs beside the first run's log
            self.broker_log = self.work / f"broker-{self.boots}.log"
        self.broker_process, line = _spawn(["-m", "broker", "-c", str(self.conf)],
                                           self.broker_log, BROKER_BOOT_SUCCESS_PREFIX)
        self.broker = line.split(", ", 1)[1].split("]", 1)[0]
        return time.monotonic() - started

    def stop_broker(self) -> None:
        if self.broker_process is not None:
            stop(self.broker_process, 120)
        self.broker_process = None

    def close(self) -> None:
        self.stop_broker()
        stop(self.namesrv_process, 30)


def proc_stats(pid: int) -> dict[str, float]:
    """RSS (MiB; anonymous memory, and mapped file pages: commitlog pages read or written
    through the mapping, page cache the kernel can take back), open fds and memory maps."""
    kib = {"VmRSS": 0, "RssAnon": 0, "RssFile": 0}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            name = line.split(":", 1)[0]
            if name in kib:
                kib[name] = int(line.split()[1])
    with open(f"/proc/{pid}/maps") as f:
        maps = sum(1 for _ in f)
    return {"rss_mib": kib["VmRSS"] / 1024, "rss_anon_mib": kib["RssAnon"] / 1024,
            "rss_file_mib": kib["RssFile"] / 1024, "fds": len(os.listdir(f"/proc/{pid}/fd")),
            "maps": maps}


def cpu_s(pid: int) -> float:
    """CPU time of all threads of a process (schedstat: nanoseconds, not clock ticks)."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            continue  # the thread ended
    return total / 1e9


def process_cpu_s(pid: int) -> float:
    """CPU time of a process, its ended threads included (utime + stime, clock ticks):
    `cpu_s` misses the time of threads that ended between two samples (it went negative
    over a send round whose worker threads came and went)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def stalls_logged(log_path: Path, offset: int) -> float:
    """The longest "event loop stalled N ms" logged after byte `offset` (0.0: none)."""
    with log_path.open("rb") as f:
        f.seek(offset)
        text = f.read().decode(errors="replace")
    return max((float(m.group(1)) for m in STALL_LINE.finditer(text)), default=0.0)


def stall_cpu_logged(log_path: Path, offset: int) -> float:
    """The most CPU the process used during one logged stall after byte `offset` (0.0:
    none): a stall of the process's own makes about its length in CPU, one of a loaded
    machine that did not run the process makes little."""
    with log_path.open("rb") as f:
        f.seek(offset)
        text = f.read().decode(errors="replace")
    return max((float(m.group(1)) for m in STALL_CPU.finditer(text)), default=0.0)


def wait_for(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.02)
    raise SystemExit(f"timed out after {timeout} s waiting for {what}")


def route_exists(stub: namesrv_pb2_grpc.NamesrvServiceStub, topic: str) -> bool:
    r = stub.GetRouteInfoByTopic(namesrv_pb2.GetRouteInfoByTopicRequest(topic=topic), timeout=10)
    return r.status.code == common_pb2.SUCCESS


# -- steps -------------------------------------------------------------------------------------
def create_topics(cluster: ScaleCluster, names: list[str],
                  namesrv: namesrv_pb2_grpc.NamesrvServiceStub) -> float:
    started = time.monotonic()
    with MQAdmin(cluster.namesrv, timeout=60) as admin:
        admin.create_topics(names, broker_addr=cluster.broker, read_queue_nums=QUEUES,
                            write_queue_nums=QUEUES)
    wait_for(lambda: route_exists(namesrv, names[-1]), 120, "the last topic's route")
    return time.monotonic() - started


def wait_dispatched(cluster: ScaleCluster, timeout: float) -> float:
    """Seconds until the broker has dispatched everything it stored (dispatch behind 0).

    The fill's first write into each queue creates its directory and file: on this
    machine's ext4 (no journal) an inode costs 0.3-0.9 ms of kernel time, so 8 queues a
    topic keep dispatch busy long after the sends answered; send rates measured meanwhile
    would share the cores with it."""
    started = time.monotonic()
    shown = started
    with MQAdmin(cluster.namesrv, timeout=30) as admin:
        while True:
            behind = admin.broker_runtime(cluster.broker).dispatch_behind_bytes
            now = time.monotonic()
            if behind <= 0:
                return now - started
            if now - started > timeout:
                raise SystemExit(f"bench.scale: dispatch still {behind:,} bytes behind after "
                                 f"{timeout:.0f} s")
            if now - shown >= 5:
                shown = now
                progress(f"  dispatch {behind:,} bytes behind ({now - started:.0f} s)")
            time.sleep(0.2)


def fill_every_queue(send_address: str, names: list[str]) -> int:
    """One 1 KiB message into every queue; returns the queues that took it."""
    element = encode_batch_message(0, BODY, b"")
    now_ms = int(time.time() * 1000)
    requests = [messaging_pb2.SendBatchRequest(
        producer_group="ScaleFill", topic=t, queue_id=q, encoded_messages=element,
        born_timestamp=now_ms) for t in names for q in range(QUEUES)]
    connections = BlockingSendConnections()
    stored = 0
    errors: dict[str, int] = {}
    lock = threading.Lock()
    chunks = [requests[i:i + FILL_BATCHES_PER_FRAME]
              for i in range(0, len(requests), FILL_BATCHES_PER_FRAME)]
    next_chunk = iter(range(len(chunks)))

    def worker() -> None:
        nonlocal stored
        for index in next_chunk:  # shared iterator: each chunk once
            payload = messaging_pb2.SendBatchesRequest(batches=chunks[index]).SerializeToString()
            answer = messaging_pb2.SendBatchesResponse.FromString(
                connections.request(send_address, KIND_SEND_BATCHES, payload, 60))
            ok = sum(1 for r in answer.responses if r.status.code == common_pb2.SUCCESS)
            with lock:
                stored += ok
                for r in answer.responses:
                    if r.status.code != common_pb2.SUCCESS:
                        name = common_pb2.ResponseCode.Name(r.status.code)
                        errors[name] = errors.get(name, 0) + 1
            if index % 200 == 0:
                progress(f"  filled {min((index + 1) * FILL_BATCHES_PER_FRAME, len(requests))}"
                         f" of {len(requests)} queues")

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    connections.close()
    if errors:
        progress(f"  queues not filled: {errors}")
    return stored


class Pinger:
    """Answer times of a cheap RPC, from a thread, until stopped."""

    def __init__(self, call: Callable[[], object]) -> None:
        self.call = call
        self.times: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            t = time.perf_counter()
            self.call()
            self.times.append(time.perf_counter() - t)
            time.sleep(0.002)

    def __enter__(self) -> Pinger:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)


def registration_figures(cluster: ScaleCluster, n: int,
                         namesrv: namesrv_pb2_grpc.NamesrvServiceStub) -> dict[str, float]:
    assert cluster.broker_process is not None
    channel = grpc.insecure_channel(cluster.broker, options=CHANNEL_OPTIONS)
    admin = admin_pb2_grpc.AdminServiceStub(channel)
    messaging = messaging_pb2_grpc.MessagingServiceStub(channel)
    table = admin.GetTopicList(admin_pb2.GetTopicListRequest(), timeout=60)
    configs = [TopicConfig(c.topic_name, c.read_queue_nums, c.write_queue_nums, c.perm,
                           c.topic_sys_flag, c.order) for c in table.topic_configs]
    body = encode_topic_table(configs, 6)
    raw = namesrv_pb2.TopicConfigTable(topic_configs=list(table.topic_configs)).ByteSize()
    # The name server's CPU for a keep-alive, and for a full registration of an unchanged
    # table (what a broker without keep-alives sends every 30 s), asked here as the broker
    # asks them; idle CPU over the same time subtracted.
    ns_pid = cluster.namesrv_process.pid
    runtime = admin.GetRuntimeInfo(admin_pb2.GetRuntimeInfoRequest(), timeout=30).table
    header = namesrv_pb2.RegisterBrokerRequest(
        cluster_name=runtime["clusterName"], broker_name=runtime["brokerName"],
        broker_addr=runtime["brokerAddr"], broker_id=int(runtime["brokerId"]),
        ha_server_addr=runtime["haServerAddr"], data_version=table.data_version)
    keep_alive = namesrv_pb2.RegisterBrokerRequest()
    keep_alive.CopyFrom(header)
    keep_alive.body_omitted = True
    full = namesrv_pb2.RegisterBrokerRequest()
    full.CopyFrom(header)
    full.compressed_topic_configs = body
    idle_before, t0 = cpu_s(ns_pid), time.monotonic()
    time.sleep(2)
    idle_rate = (cpu_s(ns_pid) - idle_before) / (time.monotonic() - t0)

    def cpu_ms_per_call(request: namesrv_pb2.RegisterBrokerRequest, calls: int) -> float:
        before, started = cpu_s(ns_pid), time.monotonic()
        for _ in range(calls):
            r = namesrv.RegisterBroker(request, timeout=60)
            assert r.status.code == common_pb2.SUCCESS and not r.body_required, r
        used = cpu_s(ns_pid) - before - idle_rate * (time.monotonic() - started)
        return max(0.0, used) * 1000 / calls

    keep_alive_ms = cpu_ms_per_call(keep_alive, 200)
    full_unchanged_ms = cpu_ms_per_call(full, 5)

    def ping_broker() -> object:
        return messaging.GetSendChannel(messaging_pb2.GetSendChannelRequest(), timeout=10)

    def ping_namesrv() -> object:
        return namesrv.GetClusterInfo(namesrv_pb2.GetClusterInfoRequest(), timeout=10)

    def change_one_topic(name: str) -> None:
        admin.CreateOrUpdateTopic(admin_pb2.CreateOrUpdateTopicRequest(
            topic_config=common_pb2.TopicConfig(topic_name=name, read_queue_nums=QUEUES,
                                                write_queue_nums=QUEUES, perm=6)), timeout=60)
        wait_for(lambda: route_exists(namesrv, name), 60, "the changed table registered")

    # The name server's CPU for a registration after one topic changed (no pings).
    ns_before, started = cpu_s(ns_pid), time.monotonic()
    change_one_topic(f"ScaleExtraA{n}")
    time.sleep(0.5)
    full_ms = max(0.0, cpu_s(ns_pid) - ns_before - idle_rate * (time.monotonic() - started)
                  ) * 1000
    # The loops' stalls during the same, with pings to both.
    broker_log, ns_log = cluster.broker_log, cluster.work / "ns.log"
    with Pinger(ping_broker) as pb, Pinger(ping_namesrv) as pn:
        time.sleep(1.0)
        quiet = {"broker": stalls_logged(broker_log, 0), "namesrv": stalls_logged(ns_log, 0)}
        offsets = broker_log.stat().st_size, ns_log.stat().st_size
        base_b, base_n = len(pb.times), len(pn.times)
        change_one_topic(f"ScaleExtraB{n}")
        time.sleep(0.5)
    channel.close()

    def ping_ms(times: list[float], base: int) -> tuple[float, float]:
        return max(times[:base], default=0.0) * 1000, max(times[base:], default=0.0) * 1000

    broker_quiet, broker_during = ping_ms(pb.times, base_b)
    ns_quiet, ns_during = ping_ms(pn.times, base_n)
    return {"register_body_bytes": len(body), "register_body_raw_bytes": raw,
            "namesrv_cpu_ms_per_keepalive": keep_alive_ms,
            "namesrv_cpu_ms_full_unchanged": full_unchanged_ms,
            "namesrv_cpu_ms_full_registration": full_ms,
            "broker_max_loop_stall_ms": stalls_logged(broker_log, offsets[0]),
            "namesrv_max_loop_stall_ms": stalls_logged(ns_log, offsets[1]),
            "broker_max_loop_stall_cpu_ms": stall_cpu_logged(broker_log, offsets[0]),
            "namesrv_max_loop_stall_cpu_ms": stall_cpu_logged(ns_log, offsets[1]),
            "broker_stall_before_ms": quiet["broker"], "namesrv_stall_before_ms": quiet["namesrv"],
            "broker_ping_max_ms": broker_during, "broker_ping_max_quiet_ms": broker_quiet,
            "namesrv_ping_max_ms": ns_during, "namesrv_ping_max_quiet_ms": ns_quiet}


def route_figures(cluster: ScaleCluster, names: list[str],
                  namesrv: namesrv_pb2_grpc.NamesrvServiceStub) -> dict[str, float]:
    sample = random.Random(7).sample(names, min(1000, len(names)))
    latencies = []
    for topic in sample:
        t = time.perf_counter()
        namesrv.GetRouteInfoByTopic(namesrv_pb2.GetRouteInfoByTopicRequest(topic=topic),
                                    timeout=10)
        latencies.append(time.perf_counter() - t)
    latencies.sort()
    producer = Producer("ScaleRoutes", cluster.namesrv, poll_name_server_interval_s=3600).start()
    try:
        producer.loop.run(producer.instance.update_routes(names), 120)  # the routes in use
        rounds = []
        for _ in range(2):
            producer.loop.run(producer.instance.update_all_routes(), 120)
            rounds.append(producer.instance.last_refresh_s)
        routes = len(producer.instance.routes)
    finally:
        producer.shutdown()
    return {"route_lookup_p50_ms": percentile(latencies, 0.5) * 1000,
            "route_lookup_p99_ms": percentile(latencies, 0.99) * 1000,
            "route_refresh_s": max(rounds), "routes_refreshed": routes}


# The sync spread / one ratio: alternating pairs of short blocks (see send_rates).
SYNC_PAIRS = 16
SYNC_PAIR_BLOCK = 250


def send_rates(cluster: ScaleCluster, names: list[str], n_async: int, n_sync: int,
               rounds: int) -> dict[str, float]:
    """Messages/s to one topic and spread over SPREAD_TOPICS (and over all), same run:
    one, spread, all, `rounds` times over; the best of each (this machine is shared), with
    the broker's CPU per message (less sensitive to other work on the machine)."""
    spread = names[:SPREAD_TOPICS]
    # A long send timeout: spread over tens of thousands of topics, async sends may wait in
    # the producer longer than the default 3 s on this shared machine (a rate, not an error).
    producer = Producer("ScaleSend", cluster.namesrv, send_timeout_s=60).start()
    try:
        producer.loop.run(producer.instance.update_routes(names), 120)

        def async_rate(topics: list[str]) -> float:
            started = time.perf_counter()
            futures = [producer.send_async(Message(topics[i % len(topics)], BODY))
                       for i in range(n_async)]
            for f in futures:
                f.result(timeout=120)
            return n_async / (time.perf_counter() - started)

        def sync_rate(topics: list[str], n: int = n_sync, first: int = 0) -> float:
            started = time.perf_counter()
            for i in range(first, first + n):
                producer.send(Message(topics[i % len(topics)], BODY))
            return n / (time.perf_counter() - started)

        assert cluster.broker_process is not None
        broker_pid = cluster.broker_process.pid
        best: dict[str, float] = {}
        for _ in range(rounds):
            for kind, rate, n in (("async", async_rate, n_async), ("sync", sync_rate, n_sync)):
                for label, topics in (("one", names[:1]), ("spread", spread), ("all", names)):
                    cpu_before = process_cpu_s(broker_pid)
                    value = rate(topics)
                    cpu_us = (process_cpu_s(broker_pid) - cpu_before) * 1e6 / n
                    key = f"{kind}_{label}_msgs_s"
                    best[key] = max(best.get(key, 0.0), value)
                    cpu_key = f"{kind}_{label}_broker_cpu_us_per_msg"
                    best[cpu_key] = min(best.get(cpu_key, float("inf")), cpu_us)
                    progress(f"  {kind} sends, {label} ({len(topics)} topics): "
                             f"{value:,.0f} msgs/s, broker CPU {cpu_us:.0f} us/msg")
        # Sync rates within 10 % cannot be told apart by the best of a few rounds here
        # (rounds swung 0.64-1.67 on this shared machine): short one / spread blocks
        # alternate, each pair gives a ratio, and the median of the pairs is the figure.
        ratios = []
        for pair in range(SYNC_PAIRS):
            one = sync_rate(names[:1], SYNC_PAIR_BLOCK)
            spread_rate = sync_rate(spread, SYNC_PAIR_BLOCK, pair * SYNC_PAIR_BLOCK)
            ratios.append(spread_rate / one)
        ratios.sort()
        progress(f"  sync spread/one over {SYNC_PAIRS} alternating pairs of "
                 f"{SYNC_PAIR_BLOCK} sends: median {percentile(ratios, 0.5):.2f}, quartiles "
                 f"{percentile(ratios, 0.25):.2f}-{percentile(ratios, 0.75):.2f}")
    finally:
        producer.shutdown()
    return {**best,
            "async_spread_vs_one": best["async_spread_msgs_s"] / best["async_one_msgs_s"],
            "sync_spread_vs_one": percentile(ratios, 0.5),
            "sync_spread_vs_one_q1": percentile(ratios, 0.25),
            "sync_spread_vs_one_q3": percentile(ratios, 0.75),
            "sync_spread_vs_one_best_rounds": (best["sync_spread_msgs_s"]
                                               / best["sync_one_msgs_s"]),
            "async_all_vs_one": best["async_all_msgs_s"] / best["async_one_msgs_s"],
            "sync_all_vs_one": best["sync_all_msgs_s"] / best["sync_one_msgs_s"]}


def run_size(n: int, work: Path, args: argparse.Namespace) -> dict[str, Any]:
    progress(f"{n} topics x {QUEUES} queues: starting a name server and a broker")
    cluster = ScaleCluster(work)
    result: dict[str, Any] = {"topics": n, "queues": n * QUEUES}
    try:
        names = topic_names(n)
        ns_channel = grpc.insecure_channel(cluster.namesrv, options=CHANNEL_OPTIONS)
        namesrv = namesrv_pb2_grpc.NamesrvServiceStub(ns_channel)
        result["create_s"] = create_topics(cluster, names, namesrv)
        progress(f"  created {n} topics in {result['create_s']:.2f} s")
        with grpc.insecure_channel(cluster.broker) as channel:
            send_address = messaging_pb2_grpc.MessagingServiceStub(channel).GetSendChannel(
                messaging_pb2.GetSendChannelRequest(), timeout=10).address
        started = time.monotonic()
        result["queues_with_data"] = fill_every_queue(send_address, names)
        result["fill_s"] = time.monotonic() - started
        result["fill_dispatch_s"] = wait_dispatched(cluster, FILL_DISPATCH_TIMEOUT_S)
        progress(f"  {result['queues_with_data']} queues hold a message "
                 f"({result['fill_s']:.1f} s; dispatched {result['fill_dispatch_s']:.1f} s "
                 "later)")
        assert cluster.broker_process is not None
        stats = proc_stats(cluster.broker_process.pid)
        result.update(broker_rss_mib=stats["rss_mib"], broker_rss_anon_mib=stats["rss_anon_mib"],
                      broker_fds=stats["fds"], broker_maps=stats["maps"])
        progress(f"  broker RSS {stats['rss_mib']:.0f} MiB ({stats['rss_anon_mib']:.0f} "
                 f"anonymous), {stats['fds']:.0f} fds, {stats['maps']:.0f} maps")
        result.update(registration_figures(cluster, n, namesrv))
        result["max_loop_stall_ms"] = max(result["broker_max_loop_stall_ms"],
                                          result["namesrv_max_loop_stall_ms"])
        progress(f"  registration body {result['register_body_bytes']:,} bytes compressed "
                 f"({result['register_body_raw_bytes']:,} raw); name server CPU "
                 f"{result['namesrv_cpu_ms_per_keepalive']:.2f} ms per keep-alive, "
                 f"{result['namesrv_cpu_ms_full_unchanged']:.1f} ms per full body of an "
                 f"unchanged table, {result['namesrv_cpu_ms_full_registration']:.0f} ms "
                 "for one topic changed; "
                 f"longest loop stall during it: broker "
                 f"{result['broker_max_loop_stall_ms']:.1f} ms, name server "
                 f"{result['namesrv_max_loop_stall_ms']:.1f} ms (process CPU during a "
                 f"stall at most {result['broker_max_loop_stall_cpu_ms']:.1f} / "
                 f"{result['namesrv_max_loop_stall_cpu_ms']:.1f} ms; before it, since start: "
                 f"{result['broker_stall_before_ms']:.1f} / "
                 f"{result['namesrv_stall_before_ms']:.1f} ms); ping max "
                 f"{result['broker_ping_max_ms']:.1f} / {result['namesrv_ping_max_ms']:.1f} ms "
                 f"(quiet {result['broker_ping_max_quiet_ms']:.1f} / "
                 f"{result['namesrv_ping_max_quiet_ms']:.1f} ms)")
        result.update(route_figures(cluster, names, namesrv))
        progress(f"  route lookup p50 {result['route_lookup_p50_ms']:.2f} ms, p99 "
                 f"{result['route_lookup_p99_ms']:.2f} ms; batched refresh of {n} routes "
                 f"{result['route_refresh_s']:.2f} s")
        if not args.skip_sends:
            result.update(send_rates(cluster, names, args.async_messages, args.sync_messages,
                                     args.rounds))
            progress(f"  async spread/one {result['async_spread_vs_one']:.2f}, sync "
                     f"spread/one {result['sync_spread_vs_one']:.2f}")
        cluster.stop_broker()
        result["restart_s"] = cluster.start_broker()
        time.sleep(1.0)
        assert cluster.broker_process is not None
        after = proc_stats(cluster.broker_process.pid)
        result.update(restart_rss_mib=after["rss_mib"], restart_rss_anon_mib=after["rss_anon_mib"],
                      restart_fds=after["fds"])
        # The sends above wrote the commitlog through its mapping and the restart's recovery
        # reads it back: RSS then counts those file pages, the anonymous part is the memory.
        progress(f"  restarted in {result['restart_s']:.2f} s, RSS {after['rss_mib']:.0f} MiB "
                 f"({after['rss_anon_mib']:.0f} anonymous, {after['rss_file_mib']:.0f} mapped "
                 f"file pages), {after['fds']:.0f} fds")
        ns_channel.close()
    finally:
        cluster.close()
    return result


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is below 1")
    return value


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.scale", description=__doc__.split(
        "\n")[0])
    parser.add_argument("--topics", default="1000,10000,50000",
                        help="sizes to run, comma-separated (default 1000,10000,50000)")
    parser.add_argument("--async-messages", type=int, default=20_000)
    parser.add_argument("--sync-messages", type=int, default=3_000)
    parser.add_argument("--rounds", type=positive_int, default=3,
                        help="send-rate rounds, the best of each kept (default 3)")
    parser.add_argument("--skip-sends", action="store_true", help="no send-rate figures")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    args = parser.parse_args(argv)
    try:
        sizes = sorted({positive_int(s) for s in args.topics.split(",") if s.strip()})
    except argparse.ArgumentTypeError as e:
        parser.error(f"--topics: {e}")
    if not sizes:
        parser.error("--topics: at least one size")
    os.environ[LOOP_STALL_ENV] = str(STALL_LOG_MS)  # the processes log their loop stalls
    results = []
    root = Path(tempfile.mkdtemp(prefix="bench-scale-"))
    try:
        for n in sizes:
            work = root / f"t{n}"
            work.mkdir()
            results.append(run_size(n, work, args))
            progress(f"{n} topics: " + json.dumps(results[-1]))
            if not args.keep:
                shutil.rmtree(work, ignore_errors=True)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
        else:
            progress(f"work directory kept: {root}")
    last = dict(results[-1])
    last["sizes"] = {str(r["topics"]): r for r in results}
    print(json.dumps(last), flush=True)


if __name__ == "__main__":
    sys.exit(main())
