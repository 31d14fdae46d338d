"""Runs every peer in every durability class and writes the table, JSON and chart."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.peers import (
    CLASSES,
    FULL,
    QUICK,
    TOPIC,
    Peer,
    Sizes,
    Target,
    machine,
    report,
    topic_names,
)
from bench.peers.cpu import CpuMeter

PEER_NAMES = ("ours", "jetstream", "redis", "rabbitmq")


def _load_peer(name: str) -> Peer:
    if name == "ours":
        from bench.peers import ours
        return ours.peer()
    if name == "jetstream":
        from bench.peers import jetstream
        return jetstream.peer()
    if name == "redis":
        from bench.peers import redis_streams
        return redis_streams.peer()
    from bench.peers import rabbitmq
    return rabbitmq.peer()


def progress(line: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {line}", flush=True)


def measure(target: Target, sizes: Sizes, say: Callable[[str], None]
            ) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    """The workloads, in order, on one running peer: its figures, and the CPU µs per message
    of the servers and of this client in each workload (its last round)."""
    topics = topic_names(sizes.topics)
    meter = CpuMeter()
    cpu: dict[str, dict[str, float]] = {}
    target.prepare(topics)
    target.one_at_a_time(sizes.warm_up)
    meter.start()
    rate, p50, p99 = target.one_at_a_time(sizes.one_at_a_time)
    cpu["one_at_a_time"] = meter.per_message(sizes.one_at_a_time)
    say(f"one at a time: {rate:,.0f} msgs/s, p50 {p50:.3f} ms, p99 {p99:.3f} ms")
    figures = {"one_at_a_time_msgs_s": rate, "one_at_a_time_p50_ms": p50,
               "one_at_a_time_p99_ms": p99, "in_flight_msgs_s": 0.0, "many_topics_msgs_s": 0.0}
    total = sizes.warm_up + sizes.one_at_a_time  # on TOPIC, to be consumed
    for _ in range(sizes.rounds):  # alternating, so that neither load gets the quieter half
        meter.start()
        sent, rate = target.in_flight([TOPIC], sizes.in_flight, sizes.window,
                                      sizes.in_flight_seconds)
        cpu["in_flight"] = meter.per_message(sent)
        total += sent
        say(f"many in flight, 1 topic: {rate:,.0f} msgs/s ({sent:,} messages)")
        figures["in_flight_msgs_s"] = max(figures["in_flight_msgs_s"], rate)
        meter.start()
        sent, rate = target.in_flight(topics, sizes.in_flight, sizes.window,
                                      sizes.in_flight_seconds)
        cpu["many_topics"] = meter.per_message(sent)
        say(f"many in flight, {len(topics)} topics: {rate:,.0f} msgs/s ({sent:,} messages)")
        figures["many_topics_msgs_s"] = max(figures["many_topics_msgs_s"], rate)
    figures["many_topics_vs_1"] = figures["many_topics_msgs_s"] / figures["in_flight_msgs_s"]
    before_consume = getattr(target, "before_consume", None)
    if before_consume is not None:  # untimed waits, out of the CPU figures too
        before_consume()
    meter.start()
    rate = target.consume(total)
    cpu["consume"] = meter.per_message(total)
    say(f"consume {total:,} messages: {rate:,.0f} msgs/s")
    figures["consume_msgs_s"] = rate
    say("CPU µs per message, servers + this client: " + ", ".join(
        f"{k} {v['server_us']:.0f} + {v['client_us']:.0f}" for k, v in cpu.items()))
    return figures, cpu


def _entry(peer: Peer) -> dict[str, Any]:
    entry: dict[str, Any] = {"version": peer.version, "classes": {}}
    if peer.missing:
        progress(f"{peer.name}: skipped ({peer.missing})")
        entry.update(status="skipped", reason=peer.missing)
    else:
        entry["status"] = "ran"
    return entry


def run_class(peer: Peer, cls: str, sizes: Sizes, work: Path) -> dict[str, Any]:
    """One peer in one durability class: its figures, or why there are none."""
    if cls in peer.not_applicable:
        reason = peer.not_applicable[cls]
        progress(f"{peer.name} ({cls}): n/a ({reason})")
        return {"status": "n/a", "reason": reason}
    setting = peer.settings[cls]
    load = ", ".join(f"{v:.1f}" for v in os.getloadavg())
    progress(f"{peer.name} ({cls}) {setting}: starting (load average {load})")

    def say(line: str) -> None:
        progress(f"{peer.name} ({cls}) {line}")

    started = time.monotonic()
    # Each peer and class in a directory of its own, removed once done: the disk holds one
    # at a time, and a peer that filled it does not fail the next.
    own = work / f"{peer.name}-{cls}"
    try:
        own.mkdir()
        with peer.open(cls, own) as target:
            figures, cpu = measure(target, sizes, say)
            extra = target.extra() if hasattr(target, "extra") else {}
            if extra:
                say(", ".join(f"{k} {v}" for k, v in extra.items()))
    except Exception as e:  # one failing peer must not lose the others' figures
        traceback.print_exc()
        progress(f"{peer.name} ({cls}) FAILED: {e}")
        return {"status": "failed", "setting": setting, "error": f"{type(e).__name__}: {e}"}
    finally:
        shutil.rmtree(own, ignore_errors=True)
    return {"status": "ok", "setting": setting, "figures": figures, "extra": extra,
            "cpu_us_per_message": cpu,
            "seconds": round(time.monotonic() - started, 1)}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench.peers",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="a smoke run: few messages, 8 topics instead of 256")
    parser.add_argument("--out", default="bench-peers-out",
                        help="where peers.json, peers.txt and peers.png go "
                             "(default bench-peers-out)")
    parser.add_argument("--peers", default=",".join(PEER_NAMES),
                        help=f"comma-separated subset of {','.join(PEER_NAMES)}")
    parser.add_argument("--classes", default=",".join(CLASSES),
                        help="comma-separated subset of a,b,c")
    parser.add_argument("--dir", default=None, help="parent of the temporary work directory")
    return parser


def _subset(text: str, allowed: tuple[str, ...], what: str) -> list[str]:
    items = [t.strip() for t in text.split(",") if t.strip()]
    unknown = [t for t in items if t not in allowed]
    if unknown or not items:
        raise SystemExit(f"--{what}: expected a comma-separated subset of "
                         f"{','.join(allowed)}, got {text!r}")
    return items


def _interrupt(signum: int, frame: object) -> None:
    """SIGINT and SIGTERM end the run through the servers' and work directory's cleanup
    (asyncio's own SIGINT handling would let a peer's client turn it into a failure)."""
    raise KeyboardInterrupt(signal.Signals(signum).name)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.dir is not None and not Path(args.dir).is_dir():
        raise SystemExit(f"--dir {args.dir}: not a directory")
    peers = _subset(args.peers, PEER_NAMES, "peers")
    classes = _subset(args.classes, tuple(CLASSES), "classes")
    sizes = QUICK if args.quick else FULL
    if not args.out:
        raise SystemExit("--out: empty (give a directory)")
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise SystemExit(f"--out {out}: a file, not a directory")
    try:  # before any work: a run takes minutes
        out.mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=out).close()
    except OSError as e:
        raise SystemExit(f"--out {out}: cannot write there: {e.strerror or e}") from None
    work = Path(tempfile.mkdtemp(prefix="bench-peers-", dir=args.dir))
    result: dict[str, Any] = {
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "quick": args.quick, "sizes": vars(sizes) | {"message_bytes": 1024},
        "machine": machine.describe(work), "classes": CLASSES, "peers": {}}
    began = time.monotonic()
    progress(f"bench.peers: {', '.join(peers)}; classes {', '.join(classes)}; work in {work}")
    handlers: dict[int, Any] = {}  # the signal handlers replaced, restored at the end
    if threading.current_thread() is threading.main_thread():  # signals: main thread only
        handlers = {signum: signal.signal(signum, _interrupt)
                    for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        loaded = [_load_peer(name) for name in peers]
        for peer in loaded:
            result["peers"][peer.name] = _entry(peer)
        # Class by class, so that the figures compared with each other are close in time.
        for cls in classes:
            for peer in loaded:
                if not peer.missing:
                    result["peers"][peer.name]["classes"][cls] = run_class(peer, cls, sizes,
                                                                           work)
    except KeyboardInterrupt as e:
        print(f"bench.peers: interrupted ({e or 'SIGINT'}); servers stopped, nothing written",
              file=sys.stderr)
        return 130
    finally:
        shutil.rmtree(work, ignore_errors=True)
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
    result["seconds"] = round(time.monotonic() - began, 1)
    result["machine"]["loadavg_end"] = list(os.getloadavg())
    result["ratios"] = report.ratios(result)
    text = report.table(result)
    print(text, flush=True)  # first: the figures are not lost if the files cannot be written
    try:
        (out / "peers.json").write_text(json.dumps(result, indent=2) + "\n")
        (out / "peers.txt").write_text(text + "\n")
        report.chart(result, out / "peers.png")
    except OSError as e:
        fd, fallback = tempfile.mkstemp(prefix="peers-", suffix=".json")
        with os.fdopen(fd, "w") as f:
            json.dump(result, f, indent=2)
        print(f"cannot write to {out}: {e}; the figures are in {fallback}", file=sys.stderr)
        return 1
    progress(f"wrote {out / 'peers.json'}, {out / 'peers.txt'}, {out / 'peers.png'}")
    failed = report.failed_runs(result)
    print(json.dumps({"ratios": result["ratios"], "failed": failed,
                      "json": str(out / "peers.json")}), flush=True)
    if not any(r["status"] == "ok" for e in result["peers"].values()
               for r in e["classes"].values()):
        print("nothing was measured: every peer asked for " + (
            "failed or was skipped" if failed else "was skipped"), file=sys.stderr)
        return 1
    if failed:
        print(f"failed: {', '.join(failed)} (the ratios of those classes are marked "
              "incomplete)", file=sys.stderr)
        return 1
    return 0
