"""Event-loop stall of a broker during admin calls on a big topic (issue 16 item 5):
`python -m bench.stall [--queues 1000000] [--max-topic-queue-nums N]`.

Starts a broker process (no name server, ASYNC_FLUSH), creates a topic of `--queues` queues,
commits one offset of a group on it, then calls GetConsumeStats for the group while a
second thread pings the broker with GetMaxOffset every 2 ms. A broker that plans or reads
every queue on its event loop answers no ping meanwhile: the longest ping is the stall.
The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import grpc

from bench import channel_limits
from mqproto import admin_pb2, admin_pb2_grpc, common_pb2, messaging_pb2, messaging_pb2_grpc

OPTIONS = [("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1)]


def start_broker(root: Path, max_queue_nums: int, tree: Path) -> tuple[subprocess.Popen[str], str]:
    return channel_limits.start_broker(root, tree, "bench-stall",
                                       f"maxTopicQueueNums={max_queue_nums}")


def measure(address: str, queues: int, topic: str = "BigTopic", group: str = "G"
            ) -> dict[str, object]:
    channel = grpc.insecure_channel(address, options=OPTIONS)
    admin = admin_pb2_grpc.AdminServiceStub(channel)
    messaging = messaging_pb2_grpc.MessagingServiceStub(channel)
    r = admin.CreateOrUpdateTopic(admin_pb2.CreateOrUpdateTopicRequest(
        topic_config=common_pb2.TopicConfig(topic_name=topic, read_queue_nums=queues,
                                            write_queue_nums=queues, perm=6)), timeout=60)
    created = r.status.code == common_pb2.SUCCESS
    out: dict[str, object] = {"queues": queues, "created": created,
                              "create_status": common_pb2.ResponseCode.Name(r.status.code),
                              "create_remark": r.status.remark}
    if not created:
        return out
    messaging.UpdateConsumerOffset(messaging_pb2.UpdateConsumerOffsetRequest(
        consumer_group=group, topic=topic, queue_id=0, commit_offset=0), timeout=10)
    # Pings on a connection of their own: on the stats call's connection they would wait
    # behind its reply's megabytes (head-of-line), which is not the broker's loop.
    ping_channel = grpc.insecure_channel(address, options=[("grpc.use_local_subchannel_pool",
                                                            1)])
    messaging = messaging_pb2_grpc.MessagingServiceStub(ping_channel)
    ping = messaging_pb2.GetMaxOffsetRequest(topic=topic, queue_id=0)
    for _ in range(50):  # warm up
        messaging.GetMaxOffset(ping, timeout=10)
    idle = []
    for _ in range(200):
        t0 = time.perf_counter()
        messaging.GetMaxOffset(ping, timeout=10)
        idle.append(time.perf_counter() - t0)
        time.sleep(0.002)
    pings: list[float] = []
    done = threading.Event()

    def pinger() -> None:
        while not done.is_set():
            t0 = time.perf_counter()
            messaging.GetMaxOffset(ping, timeout=60)
            pings.append(time.perf_counter() - t0)
            time.sleep(0.002)

    thread = threading.Thread(target=pinger)
    thread.start()
    time.sleep(0.05)
    # Raw bytes: parsing a reply of a million queues would stall this process's pings.
    raw = channel.unary_unary("/mqcluster.v1.AdminService/GetConsumeStats",
                              request_serializer=admin_pb2.GetConsumeStatsRequest.SerializeToString)
    t0 = time.perf_counter()
    reply = raw(admin_pb2.GetConsumeStatsRequest(consumer_group=group, topic=topic),
                timeout=300)
    call_s = time.perf_counter() - t0
    done.set()
    thread.join()
    channel.close()
    ping_channel.close()
    stats = admin_pb2.GetConsumeStatsResponse.FromString(reply)
    reported = sum(len(s.offset_table) for s in stats.consume_stats)
    out.update({
        "consume_stats_s": round(call_s, 3), "queues_reported": reported,
        "reply_mb": round(len(reply) / 1e6, 1),
        "ping_idle_p50_ms": round(statistics.median(idle) * 1000, 2),
        "ping_max_ms": round(max(pings) * 1000, 1), "pings": len(pings),
        "ping_p50_ms": round(statistics.median(pings) * 1000, 2),
    })
    return out


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.stall", description=__doc__)
    parser.add_argument("--queues", type=int, default=1_000_000)
    parser.add_argument("--max-topic-queue-nums", type=int, default=0,
                        help="the broker's maxTopicQueueNums (default: --queues)")
    parser.add_argument("--tree", type=Path, default=Path(__file__).resolve().parents[1],
                        help="the checkout whose broker runs (default: this one)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-stall-") as tmp:
        process, address = start_broker(Path(tmp), args.max_topic_queue_nums or args.queues,
                                        args.tree)
        try:
            result = measure(address, args.queues)
        finally:
            process.terminate()
            process.wait(timeout=30)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
