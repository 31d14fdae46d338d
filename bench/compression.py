"""Body compression benchmark: `python -m bench.compression [--messages N] [--rounds R]`.

Starts a name server, a master and its slave (real processes on loopback, ASYNC_MASTER,
ASYNC_FLUSH), then sends 16 KiB JSON-like bodies (records of ids, names, timestamps and
numbers, each body different) with async sends, in turns: uncompressed (a threshold over
the body size), zstd (level 3) and zlib (RocketMQ's default, level 5), ROUNDS times,
each turn to a topic of its own. Per mode it reports:
- bytes on disk: the master's commitlog growth per message;
- bytes on the HA link: the slave's commitlog growth per message once it caught up (the
  link carries the commitlog's bytes);
- the async send rate (messages/s), the median over the rounds; the ratio to uncompressed
  is the median of the per-round ratios (turns of both see the same machine load).
Goals (issue 35): zstd bytes <= 0.35 of uncompressed on disk and on the link; zstd send
rate >= 0.9 of uncompressed. The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from pathlib import Path

from bench.e2e import BROKER_BOOT_SUCCESS_PREFIX, _spawn, start_namesrv, stop
from mqclient import Message, Producer
from mqclient.admin import MQAdmin

BODY_BYTES = 16 * 1024
MODES = {  # name -> Producer options
    "plain": {"compress_msg_body_over_howmuch": 1 << 30},
    "zstd": {"compress_type": "zstd", "compress_level": 3},
    "zlib": {"compress_type": "zlib", "compress_level": 5},
}
WORDS = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india",
         "juliet", "kilo", "lima", "mike", "november", "oscar", "papa", "quebec", "romeo")
CATCH_UP_TIMEOUT_S = 60.0


def json_bodies(n: int, seed: int = 7) -> list[bytes]:
    """`n` different JSON documents of BODY_BYTES bytes: arrays of order-like records."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        records = []
        size = 2
        while size < BODY_BYTES - 400:
            record = {
                "orderId": f"{rng.getrandbits(64):016x}",
                "customer": {"name": f"{rng.choice(WORDS)} {rng.choice(WORDS)}",
                             "tier": rng.choice(("gold", "silver", "bronze")),
                             "id": rng.randrange(10**9)},
                "items": [{"sku": f"SKU-{rng.randrange(10**5):05d}",
                           "qty": rng.randrange(1, 9),
                           "price": round(rng.uniform(1, 500), 2)}
                          for _ in range(rng.randrange(1, 4))],
                "createdAt": 1_760_000_000_000 + rng.randrange(10**9),
                "status": rng.choice(("NEW", "PAID", "SHIPPED", "DELIVERED")),
            }
            records.append(record)
            size += len(json.dumps(record)) + 2
        body = json.dumps(records).encode()
        out.append(body[:BODY_BYTES] if len(body) > BODY_BYTES else body.ljust(BODY_BYTES))
    return out


def _broker(work: Path, name: str, namesrv: str, broker_id: int):  # type: ignore[no-untyped-def]
    props = {
        "brokerClusterName": "BenchCluster", "brokerName": "broker-a",
        "brokerId": str(broker_id), "listenPort": "0", "bindAddress": "127.0.0.1",
        "brokerIP1": "127.0.0.1", "namesrvAddr": namesrv,
        "brokerRole": "SLAVE" if broker_id else "ASYNC_MASTER", "flushDiskType": "ASYNC_FLUSH",
        "storePathRootDir": str(work / name), "autoCreateTopicEnable": "true",
    }
    conf = work / f"{name}.conf"
    conf.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    process, line = _spawn(["-m", "broker", "-c", str(conf)], work / f"{name}.log",
                           BROKER_BOOT_SUCCESS_PREFIX)
    return process, line.split(", ", 1)[1].split("]", 1)[0]


def _offsets(admin: MQAdmin, master: str, slave: str) -> tuple[int, int]:
    return (admin.broker_runtime(master).commit_log_max_offset,
            admin.broker_runtime(slave).commit_log_max_offset)


def _caught_up(admin: MQAdmin, master: str, slave: str) -> tuple[int, int]:
    deadline = time.monotonic() + CATCH_UP_TIMEOUT_S
    while True:
        m, s = _offsets(admin, master, slave)
        if s >= m or time.monotonic() > deadline:
            return m, s
        time.sleep(0.05)


def send_async(producer: Producer, topic: str, bodies: list[bytes], n: int) -> float:
    started = time.perf_counter()
    futures = [producer.send_async(Message(topic, bodies[i % len(bodies)])) for i in range(n)]
    for f in futures:
        f.result(timeout=120)
    return n / (time.perf_counter() - started)


def run(messages: int, rounds: int) -> dict[str, float]:
    bodies = json_bodies(64)
    figures: dict[str, dict[str, list[float]]] = {
        mode: {"rate": [], "disk": [], "link": []} for mode in MODES}
    with tempfile.TemporaryDirectory(prefix="bench-compression-") as tmp:
        work = Path(tmp)
        processes = []
        try:
            ns, namesrv = start_namesrv(work)
            processes.append(ns)
            master_process, master = _broker(work, "master", namesrv, 0)
            processes.append(master_process)
            slave_process, slave = _broker(work, "slave", namesrv, 1)
            processes.append(slave_process)
            producers = {mode: Producer(f"PG-{mode}", namesrv, default_topic_queue_nums=8,
                                        send_timeout_s=60,
                                        **opts).start()  # type: ignore[arg-type]
                         for mode, opts in MODES.items()}
            with MQAdmin(namesrv) as admin:
                for mode, producer in producers.items():  # warm-up: routes, connections
                    send_async(producer, f"Warm-{mode}", bodies, 200)
                for r in range(rounds):
                    order = list(MODES) if r % 2 == 0 else list(reversed(MODES))
                    for mode in order:
                        topic = f"Bench-{mode}-{r}"
                        producers[mode].send(Message(topic, b"create"))  # its route
                        before = _caught_up(admin, master, slave)
                        rate = send_async(producers[mode], topic, bodies, messages)
                        after = _caught_up(admin, master, slave)
                        figures[mode]["rate"].append(rate)
                        figures[mode]["disk"].append((after[0] - before[0]) / messages)
                        figures[mode]["link"].append((after[1] - before[1]) / messages)
            for producer in producers.values():
                producer.shutdown()
        finally:
            for process in reversed(processes):
                stop(process, 30)
    out: dict[str, float] = {"body_bytes": BODY_BYTES, "messages_per_turn": messages,
                             "rounds": rounds}
    plain = figures["plain"]
    for mode, f in figures.items():
        out[f"{mode}_send_msgs_s"] = statistics.median(f["rate"])
        out[f"{mode}_disk_bytes_per_msg"] = statistics.median(f["disk"])
        out[f"{mode}_link_bytes_per_msg"] = statistics.median(f["link"])
        if mode != "plain":
            out[f"{mode}_disk_ratio"] = statistics.median(
                a / b for a, b in zip(f["disk"], plain["disk"], strict=True))
            out[f"{mode}_link_ratio"] = statistics.median(
                a / b for a, b in zip(f["link"], plain["link"], strict=True))
            out[f"{mode}_send_rate_ratio"] = statistics.median(
                a / b for a, b in zip(f["rate"], plain["rate"], strict=True))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=3000, help="messages per turn")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    out = run(args.messages, args.rounds)
    for mode in MODES:
        line = (f"{mode:6} {out[f'{mode}_send_msgs_s']:9.0f} msg/s  disk "
                f"{out[f'{mode}_disk_bytes_per_msg']:8.0f} B/msg  HA link "
                f"{out[f'{mode}_link_bytes_per_msg']:8.0f} B/msg")
        if mode != "plain":
            line += (f"  vs plain: disk {out[f'{mode}_disk_ratio']:.3f}, link "
                     f"{out[f'{mode}_link_ratio']:.3f}, send rate "
                     f"{out[f'{mode}_send_rate_ratio']:.3f}")
        print(line)
    print("goals: zstd disk and link <= 0.35 of plain; zstd send rate >= 0.9 of plain")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
