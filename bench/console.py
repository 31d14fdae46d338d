"""Console page benchmark: `python -m bench.console [--topics 50000] [--groups 2000]`.

A local cluster (`mqcluster up --groups 2`), TOPICS topics (one queue each) created on both
masters and GROUPS consumer groups with committed offsets (each on one topic, a tenth of
them behind), then a real `mqconsole` process. Each page is asked REPEAT times after one
warm-up: its server time (the console's Server-Timing header) and the whole request as the
client sees it, against a static page of the same size served by a plain HTTP server in
this process in the same run (the floor of a page that does nothing).

Goal (issue 40): every page <= 300 ms server time. Progress goes to stderr; the last line is
one JSON object: per page the median / max server ms, client ms and the static page's ms.
"""

from __future__ import annotations

import argparse
import http.server
import json
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from mqclient.admin import MQAdmin
from tests.support.processes import LocalCluster, child_env

GOAL_MS = 300.0
LAG_TOPICS = 20  # topics the lagging groups are behind on


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def fetch(url: str) -> tuple[float, float | None, bytes]:
    """(client ms, server ms from Server-Timing, body)."""
    started = time.perf_counter()
    with urllib.request.urlopen(url, timeout=30) as r:
        body = r.read()
        timing = r.headers.get("Server-Timing", "")
    client_ms = (time.perf_counter() - started) * 1000
    m = re.search(r"dur=([0-9.]+)", timing)
    return client_ms, float(m[1]) if m else None, body


class StaticServer:
    """Serves one body at /, whatever it is set to (the floor for a page of that size)."""

    def __init__(self) -> None:
        self.body = b""
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(owner.body)))
                self.end_headers()
                self.wfile.write(owner.body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def populate(admin: MQAdmin, topics: int, groups: int) -> None:
    names = [f"bench-topic-{i:05d}" for i in range(topics)]
    started = time.monotonic()
    admin.create_topics(names, read_queue_nums=1, write_queue_nums=1)
    deadline = time.monotonic() + 300
    while len(admin.topic_list()) < topics:
        if time.monotonic() > deadline:
            raise SystemExit("the name server did not list every topic in 300 s")
        time.sleep(0.5)
    log(f"{topics} topics created and routed in {time.monotonic() - started:.1f} s")
    started = time.monotonic()
    for i in range(LAG_TOPICS):
        for _ in range(5):
            admin.send_message(names[i], b"x" * 100, keys=[f"key-{i}"])
    masters = {g.broker_name: g.master_addr for g in admin.cluster_info().all_groups()}
    route_of: dict[str, str] = {}
    for i in range(groups):
        topic = names[i % LAG_TOPICS] if i % 10 == 0 else names[i % topics]
        if topic not in route_of:
            route_of[topic] = admin.topic_route(topic).broker_groups[0].broker_name
        addr = masters[route_of[topic]]
        assert addr is not None
        # A tenth of the groups committed nothing of the 5 messages: they are 5 behind.
        admin.update_consumer_offset(addr, f"bench-group-{i:04d}", topic, 0, 0)
    log(f"{groups} groups committed in {time.monotonic() - started:.1f} s")


def measure(console: str, static: StaticServer, pages: dict[str, str], repeat: int
            ) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for name, path in pages.items():
        cold_ms, cold_server, body = fetch(console + path)
        static.body = body
        fetch(static.url)
        server, client, floor = [], [], []
        for _ in range(repeat):
            c, s, _ = fetch(console + path)
            client.append(c)
            server.append(s or 0.0)
            floor.append(fetch(static.url)[0])
        results[name] = {
            "bytes": len(body), "cold_server_ms": round(cold_server or 0.0, 1),
            "server_ms": round(statistics.median(server), 1),
            "server_max_ms": round(max(server), 1),
            "client_ms": round(statistics.median(client), 1),
            "static_ms": round(statistics.median(floor), 2)}
        r = results[name]
        log(f"{name:<14} {r['bytes']:>8} B  server {r['server_ms']:>7.1f} ms (max "
            f"{r['server_max_ms']:.1f}, cold {r['cold_server_ms']:.1f})  client "
            f"{r['client_ms']:>7.1f} ms  static page {r['static_ms']:.2f} ms"
            + ("" if r["server_max_ms"] <= GOAL_MS else "  OVER GOAL"))
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topics", type=int, default=50_000)
    parser.add_argument("--groups", type=int, default=2_000)
    parser.add_argument("--repeat", type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-console-") as tmp:
        root = Path(tmp)
        with LocalCluster(root / "cluster", "--groups", "2", "--no-metrics",
                          "--set", "mappedFileSizeCommitLog=4194304") as local:
            with MQAdmin(local.namesrv_addr, timeout=60) as admin:
                populate(admin, args.topics, args.groups)
            process = subprocess.Popen(
                [sys.executable, "-m", "console", "--namesrv", local.namesrv_addr,
                 "--listen", "127.0.0.1:0"], stdout=subprocess.PIPE, text=True,
                env=child_env())
            static = StaticServer()
            try:
                assert process.stdout is not None
                line = process.stdout.readline()
                console = line.split()[-1]
                lagging = "bench-group-0000"
                pages = {
                    "cluster": "cluster", "topics": "topics",
                    "topics_filter": "topics?q=topic-4999", "topics_last": "topics?page=500",
                    "topic": "topics/bench-topic-00001", "groups": "groups",
                    "groups_by_lag": "groups?sort=lag&order=desc&page=3",
                    "group": f"groups/{lagging}",
                    "messages_key": "messages?mode=key&topic=bench-topic-00001&key=key-1",
                    "messages_time": "messages?mode=time&topic=bench-topic-00001",
                    "api_topics": "api/topics?size=1000", "api_groups": "api/groups"}
                results = measure(console, static, pages, args.repeat)
            finally:
                static.close()
                process.terminate()
                process.wait(10)
    worst = max(r["server_max_ms"] for r in results.values())
    log(f"worst page server time {worst:.1f} ms (goal <= {GOAL_MS:.0f} ms): "
        + ("met" if worst <= GOAL_MS else "NOT met"))
    print(json.dumps({"topics": args.topics, "groups": args.groups, "pages": results,
                      "worst_server_ms": worst, "goal_ms": GOAL_MS}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
