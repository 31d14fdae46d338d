"""The screenshots of docs/console.md: a local cluster (`mqcluster up --groups 2 --slaves 1
--console`), some topics, a group 100 messages behind, an online consumer, messages with
keys, then headless Debian chromium (playwright, executable_path) photographs each view.

    .venv/bin/python scripts/console_screenshots.py [--out docs/images] [--dir DIR]

The lag status and history on the group page come from small group_status / group_lag
tables this script writes (the lag job's columns, a made-up rising lag), so that the page
shows them without a JVM; docs/console.md says so under that screenshot.
"""

from __future__ import annotations

import argparse
import datetime
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from mqclient import ConsumeFromWhere, PushConsumer
from mqclient.admin import MQAdmin
from mqclient.cli import mqcluster
from mqclient.demo import console_url

GROUP = "OrderProcessing"
TOPIC = "Orders"


def wait_route(admin: MQAdmin, topic: str) -> None:
    for _ in range(100):
        try:
            if len(admin.topic_route(topic).queue_datas) == 2:
                return
        except Exception:  # noqa: BLE001 - not there yet
            pass
        time.sleep(0.1)
    raise SystemExit(f"no route of {topic}")


def write_lag_tables(out: Path) -> None:
    now = datetime.datetime.now().replace(microsecond=0)
    times = [now - datetime.timedelta(seconds=10 * (30 - i)) for i in range(31)]
    lag = [min(100, max(0, (i - 8) * 6)) for i in range(31)]
    history = pa.table({
        "snapshot_time": times, "cluster": ["DefaultCluster"] * 31, "group": [GROUP] * 31,
        "topic_kind": ["normal"] * 31, "message_lag_sum": lag,
        "time_lag_max_s": [float(max(0, (i - 8) * 10)) if lag[i] else 0.0 for i in range(31)]})
    status = pa.table({
        "cluster": ["DefaultCluster"], "group": [GROUP], "topic_kind": ["normal"],
        "status": ["STALL"], "snapshot_time": [times[-1]], "queues": [8],
        "message_lag_sum": [100], "time_lag_max_s": [220.0], "worst_topic": [TOPIC],
        "worst_broker_name": ["broker-a"], "worst_queue_id": [2]})
    for name, table in (("group_lag", history), ("group_status", status)):
        (out / name).mkdir(parents=True, exist_ok=True)
        pq.write_table(table, out / name / "part-0.parquet")


def populate(admin: MQAdmin) -> str:
    """Topics, a group 100 behind, messages with keys; returns one message's offsetMsgId."""
    admin.create_topics([f"app-events-{i:04d}" for i in range(1200)], read_queue_nums=2,
                        write_queue_nums=2)
    admin.create_topic(TOPIC, read_queue_nums=4, write_queue_nums=4)
    wait_route(admin, TOPIC)
    first = admin.send_message(TOPIC, json.dumps({"order": 1, "amount": 12.5}).encode(),
                               keys=["order-1"], tag="created")
    for q in admin.topic_status(TOPIC):
        master = admin.topic_route(TOPIC).group(q.broker_name).master_addr
        assert master is not None
        admin.update_consumer_offset(master, GROUP, TOPIC, q.queue_id, q.max_offset)
    for i in range(2, 102):
        admin.send_message(TOPIC, json.dumps({"order": i, "amount": 10 + i}).encode(),
                           keys=[f"order-{i}"], tag="created")
    return first.offset_msg_id


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("docs/images"))
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args()
    chromium = shutil.which("chromium")
    if chromium is None:
        print("Debian's chromium is not installed (apt-get install chromium)", file=sys.stderr)
        return 1
    from playwright.sync_api import sync_playwright

    directory = args.dir or Path(tempfile.mkdtemp(prefix="console-shots-")) / "cluster"
    if mqcluster.main(["up", "--dir", str(directory), "--groups", "2", "--slaves", "1",
                       "--console", "--namesrv-port", "0"]) != 0:
        return 1
    try:
        state = mqcluster.load_state(directory.resolve())
        assert state is not None
        layout = state[0]
        write_lag_tables(directory / "analytics" / "lag")
        url = console_url(layout)
        assert url is not None
        consumer = PushConsumer("PaymentsAudit", layout.namesrv_addr,
                                consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
        consumer.subscribe(TOPIC, "*")
        consumer.register_listener_concurrently(lambda msgs: None)
        with MQAdmin(layout.namesrv_addr) as admin:
            msg_id = populate(admin)
            consumer.start()
            time.sleep(8)  # the consumer catches up; the brokers' TPS settle
        args.out.mkdir(parents=True, exist_ok=True)
        shots = [("cluster", "cluster"), ("topics?q=app-events", "topics"),
                 (f"topics/{TOPIC}", "topic"), ("groups", "groups"), (f"groups/{GROUP}", "group"),
                 (f"messages?mode=key&topic={TOPIC}&key=order-42", "messages"),
                 (f"messages/view?id={msg_id}", "message")]
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium, headless=True,
                                        args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            for path, name in shots:
                page.goto(url + path)
                page.screenshot(path=str(args.out / f"console-{name}.png"), full_page=True)
                print(f"{args.out / f'console-{name}.png'}: {url}{path}")
            browser.close()
        consumer.shutdown()
    finally:
        mqcluster.main(["down", "--dir", str(directory), "--clean"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
