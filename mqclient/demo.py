"""The README's main job (`make run`): a local cluster, a short produce/consume stream and
the group's consumer progress, left running for the reader to explore.

    python -m mqclient.demo [--dir mqcluster-local] [--messages 2000]

1. `mqcluster up` with two broker groups, each a master and a slave (reused when it runs);
2. a producer sends the messages (sync sends, then async sends batched by the producer);
3. a push consumer of `DemoGroup` consumes them, commits its offsets and leaves;
4. a few more messages are sent while nobody consumes, a few a second, so the lag climbs;
5. `mqadmin consumerProgress` and `mqadmin haStatus` print what the brokers report;
6. lag analytics: collector snapshots of the whole cluster (`mqcollect`), one a second from
   before the first send to the end, so the charts show the lag rise and drain; the Spark
   lag job over them (`spark_analytics.lag`, local mode; needs Java) and its report: the
   terminal table (DemoGroup 100 behind) and an HTML page with charts.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from mqclient import ConsumeFromWhere, Message, MessageExt, Producer, PushConsumer
from mqclient.admin import AdminError, MQAdmin
from mqclient.admin_types import HAStatus
from mqclient.cli import mqadmin, mqcluster
from mqclient.cli.arguments import int_range
from spark_analytics.collect import Collector, write_snapshot
from spark_analytics.schema import SNAPSHOTS_DIR
from spark_analytics.session import java_problem

TOPIC = "DemoTopic"
GROUP = "DemoGroup"
PRODUCER_GROUP = "DemoProducer"
LAGGING_MESSAGES = 100
MAX_DEMO_MESSAGES = 100_000  # 1 KiB each, all kept in memory to check what came back
CONSUME_TIMEOUT_S = 60.0
SLAVE_WAIT_S = 15.0
SNAPSHOT_INTERVAL_S = 1.0
# The messages sent while nobody consumes go out over this long: the lag climbs in steps.
LAGGING_SEND_S = 5.0
LAG_JOB_TIMEOUT_S = 600.0


def _title(text: str) -> None:
    print(f"\n== {text}", flush=True)


def run(directory: str, messages: int) -> int:
    _title("starting the local cluster (mqcluster up --groups 2 --slaves 1)")
    if mqcluster.main(["up", "--dir", directory, "--groups", "2", "--slaves", "1"]) != 0:
        return 1
    state = mqcluster.load_state(Path(directory).resolve())
    assert state is not None
    namesrv = state[0].namesrv_addr

    _title(f"creating {TOPIC} (8 queues on each master)")
    mqadmin.main(["updateTopic", "-n", namesrv, "-t", TOPIC, "-c", state[0].cluster_name,
                  "-r", "8", "-w", "8"])
    _wait_for_route(namesrv, state[0].shape[0])
    analytics = Path(directory) / "analytics"
    snapshots = BackgroundSnapshots(namesrv, analytics)
    try:
        finished = _produce_and_consume(namesrv, messages, state[0].cluster_name)
    finally:
        taken = snapshots.stop()
    print(f"\n{taken} collector snapshots, one every {SNAPSHOT_INTERVAL_S:g} s while the demo "
          f"ran, in {analytics / SNAPSHOTS_DIR}" + (f" ({snapshots.errors} failed: "
                                                  f"{snapshots.last_error})"
                                                  if snapshots.errors else ""))
    analysed = _lag_analytics(analytics) if finished else False

    print(f"\nThe cluster keeps running. Try:\n"
          f"  export NAMESRV_ADDR='{namesrv}'\n"
          f"  .venv/bin/mqadmin clusterList\n"
          f"  .venv/bin/mqadmin consumeMessage -t {TOPIC} -c 3\n"
          f"  .venv/bin/mqcollect --out {analytics} --interval 10     # more snapshots\n"
          f"  .venv/bin/python -m spark_analytics.lag --in {analytics} "
          f"--out {analytics}/lag\n"
          f"Stop it:  .venv/bin/mqcluster down --dir {directory}   (add --clean to drop data)")
    return 0 if finished and analysed else 1


class BackgroundSnapshots:
    """A collector snapshot of the whole cluster every SNAPSHOT_INTERVAL_S, in a thread,
    from now until stop(), which takes a last one (the state the report ends with)."""

    def __init__(self, namesrv: str, out: Path) -> None:
        self.out = out
        self.taken = self.errors = 0
        self.last_error = ""
        self._stop = threading.Event()
        self._collector = Collector(namesrv)
        self._thread = threading.Thread(target=self._run, name="snapshots", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._take()
            self._stop.wait(SNAPSHOT_INTERVAL_S)

    def _take(self) -> None:
        try:
            snap = self._collector.snapshot()
            write_snapshot(snap.table(), self.out, snap.snapshot_ms)
            self.taken += 1
        except Exception as e:  # noqa: BLE001 - counted and said; the demo goes on
            self.errors += 1
            self.last_error = str(e)

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        self._take()
        self._collector.close()
        return self.taken


def _produce_and_consume(namesrv: str, messages: int, cluster: str) -> bool:
    """Steps 2-5; True when the consumer took every message sent."""

    _title(f"producing {messages} messages of 1 KiB: half sync sends, half async sends")
    producer = Producer(PRODUCER_GROUP, namesrv).start()
    try:
        started = time.monotonic()
        half = messages // 2
        results = [producer.send(Message(TOPIC, _body(i), tags="TagA", keys=f"order-{i}"))
                   for i in range(half)]
        futures = [producer.send_async(Message(TOPIC, _body(i), tags="TagB", keys=f"order-{i}"))
                   for i in range(half, messages)]
        results += [f.result(CONSUME_TIMEOUT_S) for f in futures]
        took = time.monotonic() - started
        print(f"sent {messages} in {took:.2f} s; last: {results[-1]}" if results else
              f"sent {messages} in {took:.2f} s")

        _title(f"consuming them with a push consumer of {GROUP}")
        expected = {r.msg_id for r in results}
        seen: set[str] = set()
        done = threading.Event()
        lock = threading.Lock()

        def listener(msgs: list[MessageExt]) -> None:
            with lock:
                seen.update(m.msg_id for m in msgs)
                if expected <= seen:
                    done.set()

        consumer = PushConsumer(GROUP, namesrv,
                                consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
        consumer.subscribe(TOPIC, "TagA || TagB").register_listener_concurrently(listener)
        consumer.start()
        started = time.monotonic()
        finished = done.wait(CONSUME_TIMEOUT_S)
        consumer.shutdown()  # commits the offsets
        earlier = len(seen - expected)
        print(f"consumed {len(seen & expected)} of the {len(expected)} messages sent now"
              + (f" and {earlier} left from an earlier run" if earlier else "")
              + f" in {time.monotonic() - started:.2f} s"
              + ("" if finished else " (timed out: see the brokers' logs)"))

        _title(f"{LAGGING_MESSAGES} more messages over {LAGGING_SEND_S:g} s while nobody "
               "consumes (lag > 0)")
        for i in range(LAGGING_MESSAGES):
            producer.send(Message(TOPIC, _body(messages + i), tags="TagA"))
            time.sleep(LAGGING_SEND_S / LAGGING_MESSAGES)
    finally:
        producer.shutdown()

    _title(f"mqadmin consumerProgress -g {GROUP}")
    mqadmin.main(["consumerProgress", "-n", namesrv, "-g", GROUP])
    _title("mqadmin haStatus")
    _wait_for_slaves(namesrv, cluster)
    mqadmin.main(["haStatus", "-n", namesrv, "-c", cluster])
    return finished


def _lag_analytics(analytics: Path) -> bool:
    """Runs the lag job over the snapshots and prints its report; False when a step failed
    (said why). Without Java the Spark part is skipped with the reason."""
    if problem := java_problem():
        print(f"skipping the Spark lag job: {problem}")
        return True
    out, page = analytics / "lag", analytics / "lag-report.html"
    _title(f"the Spark lag job (python -m spark_analytics.lag --in {analytics} --out {out})")
    started = time.monotonic()
    for step in (["-m", "spark_analytics.lag", "--in", str(analytics), "--out", str(out)],
                 ["-m", "spark_analytics.report", "--in", str(out), "--html", str(page)]):
        try:
            done = subprocess.run([sys.executable, *step], timeout=LAG_JOB_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            print(f"{step[1]} did not finish within {LAG_JOB_TIMEOUT_S:.0f} s", flush=True)
            return False
        if done.returncode != 0:
            print(f"{step[1]} failed (exit {done.returncode})", flush=True)
            return False
        if step[1] == "spark_analytics.lag":
            print(f"lag job done in {time.monotonic() - started:.1f} s; its report:", flush=True)
    print(f"Open the page in a browser: file://{page.resolve()}")
    return True


def _wait_for_route(namesrv: str, groups: int) -> None:
    """Until the name server's route of TOPIC lists every broker group (at most
    SLAVE_WAIT_S): each master registers the new topic on its own, and a producer that
    fetched the route before the last one did would send to the others only."""
    deadline = time.monotonic() + SLAVE_WAIT_S
    with MQAdmin(namesrv) as admin:
        while time.monotonic() < deadline:
            try:
                if len({q.broker_name for q in admin.topic_route(TOPIC).queue_datas}) >= groups:
                    return
            except AdminError:
                pass
            time.sleep(0.2)


def _wait_for_slaves(namesrv: str, cluster: str) -> None:
    """Until every slave is linked to its master and has caught up (at most
    SLAVE_WAIT_S): a slave started with its master may have tried to connect before the
    master listened, and tries again only after its 5 s reconnect interval."""
    deadline = time.monotonic() + SLAVE_WAIT_S
    with MQAdmin(namesrv) as admin:
        while time.monotonic() < deadline:
            try:
                statuses = admin.ha_status_of_cluster(cluster)
            except AdminError:
                statuses = []
            answered = [s for s in statuses if isinstance(s, HAStatus)]
            ends = {s.broker_name: s.master_commit_log_max_offset for s in answered if s.master}
            slaves = [s for s in answered if not s.master]
            if answered and len(answered) == len(statuses) and all(
                    s.master_link is not None and s.master_link.connected
                    and s.master_link.max_offset >= ends.get(s.broker_name, 0)
                    for s in slaves):
                return
            time.sleep(0.5)


def _body(i: int) -> bytes:
    return f"message {i:08d} ".encode().ljust(1024, b".")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="mqdemo", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", default=mqcluster.DEFAULT_DIR)
    parser.add_argument("--messages", type=int_range(1, MAX_DEMO_MESSAGES), default=2000,
                        help=f"messages to send, 1..{MAX_DEMO_MESSAGES} (default 2000)")
    args = parser.parse_args(argv)
    return run(args.dir, args.messages)


if __name__ == "__main__":
    sys.exit(main())
