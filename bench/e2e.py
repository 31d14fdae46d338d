"""End-to-end benchmark: `python -m bench.e2e [--messages N] [--sync N]`.

Starts a name server and one ASYNC_FLUSH broker (real processes on loopback), then measures
with 1 KiB messages: sync sends one at a time (latency percentiles), batches of 32, async
sends with many in flight (gathered into batches by the producer), and a push consumer
reading everything back; then, as references, servers that do no work driven the same way:
one speaking the broker's send channel (bench.channel_floor, what sends use) and a gRPC one
(bench.grpc_floor, what gRPC calls would allow). Client and broker share this machine's
cores. Each phase also reports the CPU time per message of the broker process and of this
one (the client), which compares modes better than rates on a loaded machine. The last
line is one JSON object.

`--modes plain,acl+tls --rounds 5` compares modes: every mode's cluster is up for the whole
run and the modes take turns, phase set by phase set, ROUNDS times (each round sends to a
topic of its own and consumes it back); each figure is then the mode's median, and a mode
against the first is the median of the per-round ratios. On this shared 2-core machine a
rate swings 30-180 % from one phase to the next; turns of both modes see the same swings.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from bench import channel_floor, grpc_floor
from common.constants import BROKER_BOOT_SUCCESS_PREFIX, NAMESRV_BOOT_SUCCESS_MESSAGE
from mqclient import ConsumeFromWhere, Message, Producer, PushConsumer
from mqclient.message import MessageExt, MQClientError
from remoting.tls import make_local_ca

REPO_ROOT = Path(__file__).resolve().parents[1]
BODY = os.urandom(1024)
TOPIC = "BenchTopic"
CONSUMER_GROUP = "BenchConsumer"
QUEUES = 8
BOOT_TIMEOUT_S = 30.0


def _spawn(args: list[str], log: Path, boot_prefix: str) -> tuple[subprocess.Popen[str], str]:
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    with log.open("w") as err:
        process = subprocess.Popen([sys.executable, *args], cwd=REPO_ROOT, env=env, text=True,
                                   stdout=subprocess.PIPE, stderr=err,
                                   stdin=subprocess.DEVNULL)
    assert process.stdout is not None
    deadline = time.monotonic() + BOOT_TIMEOUT_S
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        if line.startswith(boot_prefix):
            return process, line.strip()
    process.kill()
    raise SystemExit(f"{args[1]} did not boot:\n{log.read_text()}")


def start_namesrv(work: Path, ns_args: list[str] | None = None
                  ) -> tuple[subprocess.Popen[str], str]:
    """A name server on a free loopback port, logging to work/ns.log: (process, address)."""
    ns, line = _spawn(["-m", "nameserver", "--listen", "127.0.0.1:0", *(ns_args or [])],
                      work / "ns.log", NAMESRV_BOOT_SUCCESS_MESSAGE)
    return ns, line.rpartition("listen=")[2]


def write_broker_conf(work: Path, namesrv: str, extra: dict[str, str]) -> Path:
    """work/broker.conf: one ASYNC_FLUSH master on a free loopback port, its store in
    work/store; `extra` adds or overrides keys."""
    props = {
        "brokerClusterName": "BenchCluster", "brokerName": "broker-a", "brokerId": "0",
        "listenPort": "0", "bindAddress": "127.0.0.1", "brokerIP1": "127.0.0.1",
        "namesrvAddr": namesrv, "brokerRole": "ASYNC_MASTER",
        "flushDiskType": "ASYNC_FLUSH", "storePathRootDir": str(work / "store"),
        "autoCreateTopicEnable": "true", **extra,
    }
    conf = work / "broker.conf"
    conf.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    return conf


def stop(process: subprocess.Popen[str], timeout: float) -> None:
    """SIGTERM, then SIGKILL when it has not ended within `timeout` seconds."""
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@contextmanager
def cluster_processes(work: Path, broker_extra: dict[str, str],
                      ns_args: list[str] | None = None
                      ) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """A name server and one broker; yields the name server address and the broker."""
    processes: list[subprocess.Popen[str]] = []
    try:
        ns, namesrv = start_namesrv(work, ns_args)
        processes.append(ns)
        conf = write_broker_conf(work, namesrv, broker_extra)
        broker, _ = _spawn(["-m", "broker", "-c", str(conf)], work / "broker.log",
                           BROKER_BOOT_SUCCESS_PREFIX)
        processes.append(broker)
        yield namesrv, broker
    finally:
        for process in reversed(processes):
            stop(process, 30)


@contextmanager
def cluster(work: Path, broker_extra: dict[str, str], ns_args: list[str] | None = None
            ) -> Iterator[str]:
    """A name server and one broker; yields the name server address."""
    with cluster_processes(work, broker_extra, ns_args) as (namesrv, _):
        yield namesrv


def process_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) process `pid` has used so far; NaN where /proc is not
    there. On a loaded machine this, per message, compares modes better than wall time."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rpartition(")")[2].split()
    except OSError:
        return float("nan")
    # after the command: state is field 3, utime and stime fields 14 and 15 (1-based)
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class CpuMeter:
    """CPU microseconds per message of the broker and of this (client) process, a phase at
    a time."""

    def __init__(self, broker_pid: int) -> None:
        self.broker_pid = broker_pid
        self._start = (0.0, 0.0)

    def start(self) -> None:
        self._start = (process_cpu_s(self.broker_pid), time.process_time())

    def per_message_us(self, messages: int) -> tuple[float, float]:
        """(broker, client) CPU us per message since start()."""
        broker, client = process_cpu_s(self.broker_pid), time.process_time()
        return ((broker - self._start[0]) * 1e6 / messages,
                (client - self._start[1]) * 1e6 / messages)


def percentile(sorted_values: list[float], p: float) -> float:
    return sorted_values[min(len(sorted_values) - 1, int(len(sorted_values) * p))]


def bench_sync(producer: Producer, n: int, topic: str = TOPIC) -> dict[str, float]:
    latencies = []
    started = time.perf_counter()
    for _ in range(n):
        t = time.perf_counter()
        producer.send(Message(topic, BODY))
        latencies.append(time.perf_counter() - t)
    elapsed = time.perf_counter() - started
    latencies.sort()
    return {"send_sync_msgs_s": n / elapsed,
            "send_sync_p50_ms": percentile(latencies, 0.50) * 1000,
            "send_sync_p99_ms": percentile(latencies, 0.99) * 1000}


def bench_batch(producer: Producer, n: int, threads: int, size: int = 32,
                topic: str = TOPIC) -> float:
    batch = [Message(topic, BODY) for _ in range(size)]
    return size * grpc_floor.calls_per_second(lambda: producer.send_batch(batch), n // size,
                                              threads)


def bench_async(producer: Producer, n: int, topic: str = TOPIC) -> float:
    started = time.perf_counter()
    futures = [producer.send_async(Message(topic, BODY)) for _ in range(n)]
    for f in futures:
        f.result(timeout=60)
    return n / (time.perf_counter() - started)


def bench_pull(namesrv: str, total: int, pull_batch: int,
               client: dict[str, Any] | None = None, topic: str = TOPIC,
               group: str = CONSUMER_GROUP) -> float:
    consumed = 0
    lock = threading.Lock()
    done = threading.Event()

    def listener(msgs: list[MessageExt]) -> None:
        nonlocal consumed
        with lock:
            consumed += len(msgs)
            if consumed >= total:
                done.set()

    consumer = PushConsumer(group, namesrv, pull_batch_size=pull_batch,
                            consume_message_batch_max_size=pull_batch,
                            pull_threshold_for_queue=4 * pull_batch,
                            consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
                            **(client or {}))
    consumer.subscribe(topic).register_listener_concurrently(listener)
    started = time.perf_counter()
    consumer.start()
    if not done.wait(300):
        raise SystemExit(f"consumer got {consumed} of {total} messages")
    elapsed = time.perf_counter() - started
    consumer.shutdown()
    return total / elapsed


# --modes: what the broker (and name server) run with, each on a fresh cluster in one run.
MODES = ("plain", "grpc", "acl", "tls", "acl+tls")
BENCH_ACCOUNT = {"accessKey": "bench", "secretKey": "bench-secret-key",
                 "defaultTopicPerm": "PUB|SUB", "defaultGroupPerm": "SUB"}


def security(mode: str, work: Path) -> tuple[dict[str, str], list[str], dict[str, Any]]:
    """(broker.conf keys, name server arguments, client keyword arguments) of a mode:
    plain (send channel on), grpc (send channel off: what ACL and TLS imply), acl, tls,
    acl+tls."""
    broker: dict[str, str] = {}
    ns_args: list[str] = []
    client: dict[str, Any] = {}
    if mode == "grpc":
        broker["sendChannelEnable"] = "false"
    if "acl" in mode:
        acl = work / "plain_acl.json"
        acl.write_text(json.dumps({"accounts": [BENCH_ACCOUNT]}))
        broker.update(aclEnable="true", aclFile=str(acl), clusterKey="bench-cluster-key")
        ns_args += ["--cluster-key", "bench-cluster-key"]
        client.update(access_key=BENCH_ACCOUNT["accessKey"],
                      secret_key=BENCH_ACCOUNT["secretKey"])
    if "tls" in mode:
        ca, cert, key = make_local_ca(work / "tls")
        broker.update(tlsEnable="true", tlsCertPath=str(cert), tlsKeyPath=str(key),
                      tlsCaPath=str(ca))
        ns_args += ["--tls-cert", str(cert), "--tls-key", str(key)]
        client["tls_ca"] = str(ca)
    return broker, ns_args, client


def run_clients(namesrv: str, args: argparse.Namespace, client: dict[str, Any],
                label: str, cpu: CpuMeter, topic: str = TOPIC,
                group: str = CONSUMER_GROUP) -> dict[str, float]:
    """One set of phases against one cluster: its figures (keys without a mode prefix);
    progress lines start with `label`."""
    figures: dict[str, float] = {}
    producer = Producer("BenchProducer", namesrv, default_topic_queue_nums=QUEUES, **client)
    producer.start()
    for attempt in range(5):  # the first send creates the topic (slow on a busy machine)
        try:
            producer.send(Message(topic, BODY), timeout_s=10)
            break
        except MQClientError as e:
            print(f"{label}warm-up send failed ({e}); again", flush=True)
            if attempt == 4:
                raise
    for _ in range(199):  # warm-up: route, channels
        producer.send(Message(topic, BODY))
    sent = 200

    def cpu_figures(name: str, messages: int) -> str:
        broker_us, client_us = cpu.per_message_us(messages)
        figures[f"{name}_broker_cpu_us_msg"] = broker_us
        figures[f"{name}_client_cpu_us_msg"] = client_us
        return f" (CPU per message: broker {broker_us:.1f} us, client {client_us:.1f} us)"

    cpu.start()
    sync = bench_sync(producer, args.sync, topic)
    figures.update(sync)
    sent += args.sync
    print(f"{label}sync: {sync['send_sync_msgs_s']:,.0f} msgs/s, p50 "
          f"{sync['send_sync_p50_ms']:.3f} ms, p99 "
          f"{sync['send_sync_p99_ms']:.3f} ms{cpu_figures('send_sync', args.sync)}",
          flush=True)
    cpu.start()
    rate = bench_batch(producer, args.messages, args.batch_threads, topic=topic)
    batched = args.messages // 32 // args.batch_threads * 32 * args.batch_threads
    sent += batched
    figures["send_batch32_msgs_s"] = rate
    print(f"{label}batch of 32 ({args.batch_threads} threads): {rate:,.0f} msgs/s"
          f"{cpu_figures('send_batch32', batched)}", flush=True)
    cpu.start()
    rate = bench_async(producer, args.messages, topic)
    sent += args.messages
    figures["send_async_msgs_s"] = rate
    print(f"{label}async (auto-batched): {rate:,.0f} msgs/s"
          f"{cpu_figures('send_async', args.messages)}", flush=True)
    producer.shutdown()
    cpu.start()
    rate = bench_pull(namesrv, sent, args.pull_batch, client, topic, group)
    figures["pull_msgs_s"] = rate
    figures["pulled_messages"] = sent
    print(f"{label}push consumer: {rate:,.0f} msgs/s over {sent:,} messages"
          f"{cpu_figures('pull', sent)}", flush=True)
    return figures


# Phases a mode is compared on: (figure name, rate key, CPU key prefix).
PHASES = (("sync", "send_sync_msgs_s", "send_sync"),
          ("batch of 32", "send_batch32_msgs_s", "send_batch32"),
          ("async", "send_async_msgs_s", "send_async"),
          ("push consumer", "pull_msgs_s", "pull"))


def _both_cpu(figures: dict[str, float], phase: str) -> float:
    return (figures[f"{phase}_broker_cpu_us_msg"]
            + figures[f"{phase}_client_cpu_us_msg"])


def compare(rounds: dict[str, list[dict[str, float]]]) -> dict[str, float]:
    """Each mode's medians over its rounds (keys MODE_...), and every mode against the
    first: the median of the per-round rate ratios (MODE_vs_FIRST_PHASE) and of the
    per-round ratios of the CPU both processes spent per message, first / mode (..._cpu:
    above 1 when the mode costs less)."""
    out: dict[str, float] = {}
    for prefix, runs in rounds.items():
        for key in runs[0]:
            out[prefix + key] = statistics.median(r[key] for r in runs)
    base_prefix, *others = rounds
    base = rounds[base_prefix]
    for prefix in others:
        pairs = list(zip(base, rounds[prefix], strict=True))
        for _, rate_key, cpu_key in PHASES:
            name = f"{prefix}vs_{base_prefix}{cpu_key}"
            out[name + "_q1"], out[name], out[name + "_q3"] = _quartiles(
                [m[rate_key] / b[rate_key] for b, m in pairs])
            out[name + "_cpu"] = statistics.median(
                _both_cpu(b, cpu_key) / _both_cpu(m, cpu_key) for b, m in pairs)
    return out


def _quartiles(values: list[float]) -> tuple[float, float, float]:
    """(first quartile, median, third quartile)."""
    if len(values) < 2:
        return values[0], values[0], values[0]
    q1, q2, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q1, q2, q3


def print_comparison(rounds: dict[str, list[dict[str, float]]],
                     figures: dict[str, float]) -> None:
    n = len(next(iter(rounds.values())))
    print(f"medians of {n} round{'s' if n > 1 else ''}, msgs/s: "
          + "; ".join(f"{prefix.rstrip('_')} " + ", ".join(
              f"{name} {figures[prefix + rate_key]:,.0f}" for name, rate_key, _ in PHASES)
              for prefix in rounds), flush=True)
    base_prefix, *others = rounds
    for prefix in others:
        print(f"{prefix.rstrip('_')} / {base_prefix.rstrip('_')}, median of {n} per-round "
              "ratios (quartiles; CPU of both processes per message, "
              f"{base_prefix.rstrip('_')} / {prefix.rstrip('_')}): " + "; ".join(
                  f"{name} {figures[f'{prefix}vs_{base_prefix}{cpu_key}']:.2f} "
                  f"({figures[f'{prefix}vs_{base_prefix}{cpu_key}_q1']:.2f}-"
                  f"{figures[f'{prefix}vs_{base_prefix}{cpu_key}_q3']:.2f}; CPU "
                  f"{figures[f'{prefix}vs_{base_prefix}{cpu_key}_cpu']:.2f})"
                  for name, _, cpu_key in PHASES), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=100_000,
                        help="messages for the batch and async phases (each)")
    parser.add_argument("--sync", type=int, default=5_000, help="sync sends")
    parser.add_argument("--batch-threads", type=int, default=2)
    parser.add_argument("--pull-batch", type=int, default=256,
                        help="messages per pull (the broker's maxTransferCount is set to it)")
    parser.add_argument("--modes", default="plain",
                        help=f"comma-separated, each on a fresh cluster: {', '.join(MODES)} "
                             "(default plain; e.g. plain,acl+tls compares them in one run)")
    parser.add_argument("--rounds", type=int, default=1,
                        help="the modes take turns this many times (clusters up throughout); "
                             "figures are medians, ratios against the first mode per round")
    parser.add_argument("--no-floors", dest="floors", action="store_false",
                        help="skip the no-work reference servers")
    args = parser.parse_args()
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    bad = [m for m in modes if m not in MODES]
    if bad or not modes:
        parser.error(f"--modes: expected some of {', '.join(MODES)}, got {args.modes!r}")
    if not 1 <= args.rounds <= 100:
        parser.error(f"--rounds: expected 1-100, got {args.rounds}")
    work = Path(tempfile.mkdtemp(prefix="bench-e2e-"))
    broker_extra = {"maxTransferCountOnMessageInMemory": str(args.pull_batch),
                    "maxTransferBytesOnMessageInMemory": str(args.pull_batch * 1200)}
    figures: dict[str, object] = {"message_bytes": len(BODY), "queues": QUEUES,
                                  "pull_batch_size": args.pull_batch}
    figures["send_batch32_threads"] = args.batch_threads
    try:
        with ExitStack() as clusters:
            runs = []  # (prefix, name server, client keywords, CPU meter) per mode
            for i, mode in enumerate(modes):
                run_dir = work / f"{i}-{mode.replace('+', '-')}"
                run_dir.mkdir()
                broker_sec, ns_args, client = security(mode, run_dir)
                repeat = modes[:i].count(mode)  # a mode given again: figures as MODE.2_
                prefix = ("" if modes == ["plain"] else
                          f"{mode}{'.' + str(repeat + 1) if repeat else ''}_")
                namesrv, broker = clusters.enter_context(cluster_processes(
                    run_dir, {**broker_extra, **broker_sec}, ns_args))
                runs.append((prefix, namesrv, client, CpuMeter(broker.pid)))
            rounds: dict[str, list[dict[str, float]]] = {prefix: [] for prefix, *_ in runs}
            for r in range(args.rounds):
                for prefix, namesrv, client, cpu in runs:
                    label = prefix if args.rounds == 1 else f"[{r + 1}/{args.rounds}] {prefix}"
                    rounds[prefix].append(run_clients(
                        namesrv, args, client, label, cpu, topic=f"{TOPIC}{r or ''}",
                        group=f"{CONSUMER_GROUP}{r or ''}"))
        figures.update(compare(rounds))
        if len(runs) > 1 or args.rounds > 1:
            print_comparison(rounds, figures)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if not args.floors:
        print(json.dumps({k: round(v, 3) if isinstance(v, float) else v
                          for k, v in figures.items()}))
        return
    # The references, same run: servers that do no work, driven the same way.
    floor = channel_floor.measure(BODY, threads=args.batch_threads)
    figures.update(floor)
    print(f"reference, a no-work send channel server: "
          f"{floor['floor_channel_batch32_msgs_s']:,.0f} msgs/s in batches of 32 "
          f"({args.batch_threads} threads)", flush=True)
    floor = grpc_floor.measure(BODY, batch_threads=args.batch_threads)
    figures.update(floor)
    print(f"reference, a no-work gRPC server: {floor['floor_unary_calls_s']:,.0f} unary "
          f"calls/s (one at a time), {floor['floor_batch32_msgs_s']:,.0f} msgs/s in batches of "
          f"32 ({args.batch_threads} threads)", flush=True)
    print(json.dumps({k: round(v, 3) if isinstance(v, float) else v
                      for k, v in figures.items()}))


if __name__ == "__main__":
    main()
