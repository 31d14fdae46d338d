"""Every `mqadmin` command checked by its output (table and --json) against one real cluster
(`mqcluster up --groups 2 --slaves 1`: a name server, broker-a and broker-b with a slave each)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from mqclient import PushConsumer
from mqclient.admin import MQAdmin
from mqclient.admin_types import AdminError
from mqclient.cli import mqadmin
from mqproto import common_pb2, messaging_pb2, messaging_pb2_grpc
from tests.support.processes import LocalCluster
from tests.support.waiting import wait_until

CLUSTER = "DefaultCluster"
MQADMIN_SCRIPT = Path(sys.executable).parent / "mqadmin"
WAIT_S = 30.0


class RunningCluster:
    def __init__(self, local: LocalCluster) -> None:
        self.local = local
        self.namesrv = local.namesrv_addr
        self.nodes = {p["name"]: p for p in local.processes}

    def addr(self, name: str) -> str:
        return str(self.nodes[name]["address"])


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningCluster]:
    directory = tmp_path_factory.mktemp("mqadmin") / "cluster"
    with LocalCluster(directory, "--groups", "2", "--slaves", "1",
                      "--set", "mappedFileSizeCommitLog=1048576", "--set", "maxHashSlotNum=1000",
                      "--set", "maxIndexNum=4000") as local:
        yield RunningCluster(local)


def run(capsys: pytest.CaptureFixture[str], running: RunningCluster, command: str, *args: str
        ) -> tuple[int, str, str]:
    """mqadmin in this process (the same main() the console script runs)."""
    code = mqadmin.main([command, "-n", running.namesrv, *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def ok(capsys: pytest.CaptureFixture[str], running: RunningCluster, command: str,
       *args: str) -> str:
    code, out, err = run(capsys, running, command, *args)
    assert code == 0, err
    assert err == ""
    return out


def ok_json(capsys: pytest.CaptureFixture[str], running: RunningCluster, command: str,
            *args: str) -> Any:
    return json.loads(ok(capsys, running, command, *args, "--json"))


def rows(table: str, first: str) -> list[list[str]]:
    """The table lines starting with `first`, split into columns."""
    return [line.split() for line in table.splitlines() if line.startswith(first)]


def create_topic(capsys: pytest.CaptureFixture[str], running: RunningCluster, topic: str,
                 queues: int, *where: str) -> str:
    out = ok(capsys, running, "updateTopic", "-t", topic, "-r", str(queues), "-w", str(queues),
             *(where or ("-c", CLUSTER)))
    with MQAdmin(running.namesrv) as admin:
        wanted = 1 if where and where[0] == "-b" else 2
        wait_until(lambda: _route_size(admin, topic) == wanted, timeout=WAIT_S,
                   message=f"route of {topic}")
    return out


def _route_size(admin: MQAdmin, topic: str) -> int:
    try:
        return len(admin.topic_route(topic).queue_datas)
    except Exception:
        return 0


# -- cluster and topics ------------------------------------------------------------------------
def test_cluster_list(capsys: pytest.CaptureFixture[str], running: RunningCluster) -> None:
    table = ok(capsys, running, "clusterList")
    assert table.splitlines()[0].startswith("#Cluster Name")
    lines = rows(table, CLUSTER)
    assert [(r[1], r[2], r[3], r[4]) for r in lines] == [
        ("broker-a", "0", running.addr("broker-a-0"), "ASYNC_MASTER"),
        ("broker-a", "1", running.addr("broker-a-1"), "SLAVE"),
        ("broker-b", "0", running.addr("broker-b-0"), "ASYNC_MASTER"),
        ("broker-b", "1", running.addr("broker-b-1"), "SLAVE")]
    listed = ok_json(capsys, running, "clusterList")
    assert [(r["cluster"], r["broker_name"], r["broker_id"], r["role"], r["error"])
            for r in listed] == [(CLUSTER, "broker-a", 0, "ASYNC_MASTER", None),
                                 (CLUSTER, "broker-a", 1, "SLAVE", None),
                                 (CLUSTER, "broker-b", 0, "ASYNC_MASTER", None),
                                 (CLUSTER, "broker-b", 1, "SLAVE", None)]
    assert all(isinstance(r["commit_log_max_offset"], int) for r in listed)


def test_update_topic_then_route_list_and_status(capsys: pytest.CaptureFixture[str],
                                                running: RunningCluster) -> None:
    out = create_topic(capsys, running, "AdminTopicA", 4)
    assert out.splitlines()[:2] == [f"create topic to {running.addr('broker-a-0')} success.",
                                    f"create topic to {running.addr('broker-b-0')} success."]
    route = ok(capsys, running, "topicRoute", "-t", "AdminTopicA")
    assert rows(route, "broker-") [:2] == [["broker-a", "4", "4", "RW"],
                                          ["broker-b", "4", "4", "RW"]]
    assert ["broker-b", CLUSTER, "1", running.addr("broker-b-1")] in rows(route, "broker-")
    data = ok_json(capsys, running, "topicRoute", "-t", "AdminTopicA")
    assert [(q["broker_name"], q["read_queue_nums"], q["write_queue_nums"], q["perm"])
            for q in data["queue_datas"]] == [("broker-a", 4, 4, 6), ("broker-b", 4, 4, 6)]
    assert {g["broker_name"]: g["addrs"] for g in data["broker_groups"]}["broker-a"] == {
        "0": running.addr("broker-a-0"), "1": running.addr("broker-a-1")}

    assert "AdminTopicA" in ok(capsys, running, "topicList").splitlines()
    assert "AdminTopicA" in ok_json(capsys, running, "topicList")

    status = ok(capsys, running, "topicStatus", "-t", "AdminTopicA")
    assert rows(status, "broker-") == [[b, str(q), "0", "0", "N/A"]
                                       for b in ("broker-a", "broker-b") for q in range(4)]
    queues = ok_json(capsys, running, "topicStatus", "-t", "AdminTopicA")
    assert len(queues) == 8 and all(q["max_offset"] == 0 for q in queues)

    # -b: one broker only.
    out = create_topic(capsys, running, "AdminTopicB", 2, "-b", running.addr("broker-a-0"))
    assert out.splitlines()[0] == f"create topic to {running.addr('broker-a-0')} success."
    data = ok_json(capsys, running, "topicRoute", "-t", "AdminTopicB")
    assert [(q["broker_name"], q["read_queue_nums"]) for q in data["queue_datas"]] == [
        ("broker-a", 2)]


def test_update_topic_with_a_list_and_a_file(capsys: pytest.CaptureFixture[str],
                                             running: RunningCluster, tmp_path: Path) -> None:
    """Issue 18: many topics in one call per broker (CreateOrUpdateTopics)."""
    out = ok(capsys, running, "updateTopic", "-t", "ListT1,ListT2,ListT3", "-r", "2", "-w", "2",
             "-c", CLUSTER)
    assert out.splitlines()[:2] == [f"create 3 topics to {running.addr('broker-a-0')} success.",
                                    f"create 3 topics to {running.addr('broker-b-0')} success."]
    names = [f"FileT{i:04d}" for i in range(2000)]
    topic_file = tmp_path / "topics.txt"
    topic_file.write_text("# topics of the test\n\n" + "\n".join(names) + "\n")
    data = ok_json(capsys, running, "updateTopic", "--topicFile", str(topic_file), "-b",
                   running.addr("broker-a-0"))
    assert data["topics"] == 2000 and data["brokers"] == [running.addr("broker-a-0")]
    with MQAdmin(running.namesrv) as admin:
        wait_until(lambda: _route_size(admin, "FileT1999") == 1 and _route_size(
            admin, "ListT3") == 2, timeout=WAIT_S, message="routes of the created topics")
        route = admin.topic_route("ListT1")
        assert [(q.broker_name, q.read_queue_nums) for q in route.queue_datas] == [
            ("broker-a", 2), ("broker-b", 2)]
    code, _, err = run(capsys, running, "updateTopic", "--topicFile", str(tmp_path / "none"))
    assert code == 1 and "cannot read the topic file" in err
    code, _, err = run(capsys, running, "updateTopic", "-t", "Good,bad topic", "-c", CLUSTER)
    assert code == 1 and "no topic of the batch was created" in err
    code, _, err = run(capsys, running, "updateTopic", "-t", "DupX,DupY,DupX", "-c", CLUSTER)
    assert code == 1 and "topic DupX is listed twice; no topic was created" in err


def test_delete_topic(capsys: pytest.CaptureFixture[str], running: RunningCluster) -> None:
    create_topic(capsys, running, "AdminDoomed", 2)
    out = ok(capsys, running, "deleteTopic", "-t", "AdminDoomed", "-c", CLUSTER)
    assert out.splitlines() == [
        f"delete topic [AdminDoomed] from {running.addr('broker-a-0')} success.",
        f"delete topic [AdminDoomed] from {running.addr('broker-b-0')} success."]
    wait_until(lambda: run(capsys, running, "topicRoute", "-t", "AdminDoomed")[0] == 1,
               timeout=WAIT_S, message="route gone")
    code, _, err = run(capsys, running, "deleteTopic", "-t", "AdminDoomed", "-c", CLUSTER,
                       "--json")
    assert code == 1 and "not exist" in err and err.count("\n") == 1


# -- messages ----------------------------------------------------------------------------------
def test_send_then_query_by_id_and_key_and_consume(capsys: pytest.CaptureFixture[str],
                                                   running: RunningCluster) -> None:
    create_topic(capsys, running, "AdminSend", 2)
    sent = ok_json(capsys, running, "sendMessage", "-t", "AdminSend", "-p", "hello admin",
                   "-k", "order-1 extra", "-c", "TagA", "-b", "broker-b", "-i", "1")
    assert (sent["status"], sent["broker_name"], sent["broker_addr"], sent["queue_id"],
            sent["queue_offset"]) == ("SUCCESS", "broker-b", running.addr("broker-b-0"), 1, 0)
    table = ok(capsys, running, "sendMessage", "-t", "AdminSend", "-p", "second", "-b",
               "broker-a", "-i", "0")
    assert rows(table, "broker-a")[0][:4] == ["broker-a", "0", "0", "SUCCESS"]

    block = ok(capsys, running, "queryMsgById", "-i", sent["offset_msg_id"])
    assert "Message Body        : hello admin" in block
    assert "Tags                : [TagA]" in block
    assert "Keys                : [order-1 extra]" in block
    assert f"MsgId (UNIQ_KEY)    : {sent['msg_id']}" in block
    found = ok_json(capsys, running, "queryMsgById", "-i", sent["offset_msg_id"])
    assert (found["body"], found["keys"], found["broker_name"], found["queue_id"],
            found["msg_id"]) == ("hello admin", ["order-1", "extra"], "broker-b", 1,
                                 sent["msg_id"])

    # The index is built asynchronously (reput): wait until the key finds it.
    wait_until(lambda: run(capsys, running, "queryMsgByKey", "-t", "AdminSend", "-k",
                           "order-1")[0] == 0, timeout=WAIT_S, message="key indexed")
    by_key = ok(capsys, running, "queryMsgByKey", "-t", "AdminSend", "-k", "order-1")
    assert rows(by_key, sent["msg_id"]) [0][:5] == [
        sent["msg_id"], sent["offset_msg_id"], "broker-b", "1", "0"]
    assert [m["msg_id"] for m in ok_json(capsys, running, "queryMsgByKey", "-t", "AdminSend",
                                         "-k", "extra")] == [sent["msg_id"]]

    consumed = ok(capsys, running, "consumeMessage", "-t", "AdminSend", "-b", "broker-b",
                  "-i", "1")
    line = rows(consumed, "broker-b")[0]
    assert line[:6] == ["broker-b", "1", "0", sent["msg_id"], "TagA", "order-1"]
    assert consumed.rstrip().endswith("1 message(s)") and "hello admin" in consumed
    everything = ok_json(capsys, running, "consumeMessage", "-t", "AdminSend")
    assert sorted(m["body"] for m in everything) == ["hello admin", "second"]
    assert ok_json(capsys, running, "consumeMessage", "-t", "AdminSend", "-b", "broker-b",
                   "-i", "1", "-o", "1") == []
    # Raw pulls commit nothing: the tools' group has no offsets anywhere.
    code, _, err = run(capsys, running, "consumerProgress", "-g", "TOOLS_CONSUMER")
    assert code == 1 and "not exist" in err


def test_consumer_progress_after_committed_offsets(capsys: pytest.CaptureFixture[str],
                                                   running: RunningCluster) -> None:
    topic, group = "AdminProgress", "AdminProgressGroup"
    create_topic(capsys, running, topic, 2)
    with MQAdmin(running.namesrv) as admin:
        for i in range(5):
            admin.send_message(topic, b"a%d" % i, broker_name="broker-a", queue_id=0)
        for i in range(3):
            admin.send_message(topic, b"b%d" % i, broker_name="broker-b", queue_id=1)
    for broker, queue_id, offset in (("broker-a-0", 0, 3), ("broker-b-0", 1, 3)):
        with grpc.insecure_channel(running.addr(broker)) as channel:
            r = messaging_pb2_grpc.MessagingServiceStub(channel).UpdateConsumerOffset(
                messaging_pb2.UpdateConsumerOffsetRequest(
                    consumer_group=group, topic=topic, queue_id=queue_id, commit_offset=offset),
                timeout=10)
            assert r.status.code == common_pb2.SUCCESS

    progress = ok_json(capsys, running, "consumerProgress", "-g", group)
    assert [(q["broker_name"], q["queue_id"], q["broker_offset"], q["consumer_offset"],
             q["diff"]) for q in progress["queues"]] == [
        ("broker-a", 0, 5, 3, 2), ("broker-a", 1, 0, -1, 0),  # -1: never committed
        ("broker-b", 0, 0, -1, 0), ("broker-b", 1, 3, 3, 0)]
    assert progress["diff_total"] == 2
    first = progress["queues"][0]
    assert first["last_timestamp_ms"] > 0 and first["first_unconsumed_timestamp_ms"] > 0
    assert first["last_commit_timestamp_ms"] > 0
    assert first["lag_bytes"] > 0 and first["lag_bytes_exact"] is True
    assert 0 <= first["lag_seconds"] < 60  # the age of message a3
    assert progress["queues"][1]["last_timestamp_ms"] == 0
    assert progress["queues"][1]["lag_seconds"] == 0

    table = ok(capsys, running, "consumerProgress", "-g", group, "-t", topic)
    assert [r[:6] for r in rows(table, topic)] == [
        [topic, "broker-a", "0", "5", "3", "2"], [topic, "broker-a", "1", "0", "never", "0"],
        [topic, "broker-b", "0", "0", "never", "0"], [topic, "broker-b", "1", "3", "3", "0"]]
    assert float(rows(table, topic)[0][6]) == pytest.approx(first["lag_seconds"], abs=5)
    assert rows(table, topic)[1][7] == "N/A"
    assert "Consume Diff Total: 2" in table and "Lag Seconds Max:" in table

    groups = ok(capsys, running, "consumerProgress")
    assert rows(groups, group + " ") == [[group, "0", "0.00", "2"]]
    listed = {g["group"]: g for g in ok_json(capsys, running, "consumerProgress")}
    assert listed[group]["diff_total"] == 2


# -- brokers and HA ----------------------------------------------------------------------------
def test_broker_status(capsys: pytest.CaptureFixture[str], running: RunningCluster) -> None:
    out = ok(capsys, running, "brokerStatus", "-b", running.addr("broker-a-0"))
    values = dict(line.split(": ", 1) for line in out.splitlines() if ": " in line)
    assert values["brokerRole".ljust(32)] == "ASYNC_MASTER"
    assert values["brokerName".ljust(32)] == "broker-a"
    by_addr = ok_json(capsys, running, "brokerStatus", "-c", CLUSTER)
    assert sorted(by_addr) == sorted(running.addr(n) for n in
                                     ("broker-a-0", "broker-a-1", "broker-b-0", "broker-b-1"))
    slave = by_addr[running.addr("broker-b-1")]
    assert (slave["broker_role"], slave["broker_id"], slave["table"]["brokerRole"]) == (
        "SLAVE", 1, "SLAVE")


def test_ha_status_shows_each_master_with_its_slave(capsys: pytest.CaptureFixture[str],
                                                    running: RunningCluster) -> None:
    with MQAdmin(running.namesrv) as admin:
        admin.send_message("AdminHA", b"replicate me", broker_name="broker-a")
    master = running.addr("broker-a-0")

    def caught_up() -> dict[str, Any] | None:
        [status] = ok_json(capsys, running, "haStatus", "-b", master)
        links = status["slaves"]
        done = (len(links) == 1 and status["master_commit_log_max_offset"] > 0
                and links[0]["ack_offset"] == status["master_commit_log_max_offset"])
        return status if done else None

    status = wait_until(caught_up, timeout=WAIT_S, message="slave acked")
    assert status["master"] is True and status["in_sync_slave_nums"] == 1
    assert status["slaves"][0]["in_sync"] is True
    assert status["slaves"][0]["fall_behind_bytes"] == 0

    table = ok(capsys, running, "haStatus", "-b", master)
    [line] = rows(table, "broker-a")
    assert line[1] == master and line[4] == str(status["master_commit_log_max_offset"])
    assert line[7] == "True"

    def all_linked() -> list[dict[str, Any]] | None:
        listing = ok_json(capsys, running, "haStatus", "-c", CLUSTER)
        linked = all(len(s["slaves"]) == 1 if s["master"] else s["master_link"]["connected"]
                     for s in listing)
        return listing if linked else None

    everything = wait_until(all_linked, timeout=WAIT_S, message="every slave linked")
    assert [(s["broker_name"], s["master"]) for s in everything] == [
        ("broker-a", True), ("broker-a", False), ("broker-b", True), ("broker-b", False)]
    for s in everything:
        if s["master"]:
            assert len(s["slaves"]) == 1
        else:
            ha_port = running.nodes[f"{s['broker_name']}-0"]["ha_port"]
            assert s["master_link"]["connected"] is True
            assert s["master_link"]["master_addr"].endswith(f":{ha_port}")
    table = ok(capsys, running, "haStatus", "-c", CLUSTER)
    assert [r[:2] for r in rows(table, "broker-") if r[1] == running.addr("broker-b-1")] == [
        ["broker-b", running.addr("broker-b-1")]]


def test_reset_offset_by_time(capsys: pytest.CaptureFixture[str],
                              running: RunningCluster) -> None:
    topic, group = "AdminReset", "AdminResetGroup"
    create_topic(capsys, running, topic, 1, "-b", running.addr("broker-a-0"))
    with MQAdmin(running.namesrv) as admin:
        for i in range(6):
            admin.send_message(topic, b"r%d" % i, broker_name="broker-a", queue_id=0)
            time.sleep(0.02)  # distinct store times
    stored = [m["store_timestamp"] for m in ok_json(capsys, running, "consumeMessage", "-t",
                                                      topic)]
    with grpc.insecure_channel(running.addr("broker-a-0")) as channel:
        messaging_pb2_grpc.MessagingServiceStub(channel).UpdateConsumerOffset(
            messaging_pb2.UpdateConsumerOffsetRequest(
                consumer_group=group, topic=topic, queue_id=0, commit_offset=6), timeout=10)

    def reset(when: str) -> list[Any]:
        return ok_json(capsys, running, "resetOffsetByTime", "-g", group, "-t", topic,
                       "-s", when)

    assert reset("earliest") == [{"broker_name": "broker-a", "queue_id": 0, "old_offset": 6,
                                  "new_offset": 0}]
    assert reset(str(stored[3]))[0]["new_offset"] == 3  # the first stored at or after
    assert reset(str(stored[3] + 1))[0]["new_offset"] == 4
    assert reset("now")[0]["new_offset"] == 6
    table = ok(capsys, running, "resetOffsetByTime", "-g", group, "-t", topic, "-s", "earliest")
    assert rows(table, "broker-a") == [["broker-a", "0", "6", "0"]]
    progress = ok_json(capsys, running, "consumerProgress", "-g", group, "-t", topic)
    assert [(q["consumer_offset"], q["diff"]) for q in progress["queues"]] == [(0, 6)]

    # A group that never committed on the topic (a typo): refused, nothing created, unless
    # forced; an epoch beyond int64 is a usage error, not a traceback.
    code, out, err = run(capsys, running, "resetOffsetByTime", "-g", "NoSuchGroup", "-t",
                         topic, "-s", "now")
    assert code == 1 and "no committed offset" in err and "nothing reset" in err
    with MQAdmin(running.namesrv) as admin, pytest.raises(AdminError, match="not exist"):
        admin.consumer_progress("NoSuchGroup", topic)
    with pytest.raises(SystemExit) as usage:
        run(capsys, running, "resetOffsetByTime", "-g", group, "-t", topic,
            "-s", "99999999999999999999")
    assert usage.value.code == 2 and "out of range" in capsys.readouterr().err

    # A consumer of the group online: refused (nothing changed) unless forced.
    release = threading.Event()
    consumer = PushConsumer(group, running.namesrv)
    consumer.subscribe(topic, "*")
    consumer.register_listener_concurrently(lambda msgs: release.wait(30))  # holds its batch
    consumer.start()
    try:
        with MQAdmin(running.namesrv) as admin:
            wait_until(lambda: admin.consumer_progress(group, topic).online_consumers == 1,
                       timeout=WAIT_S, message="consumer online")
        code, out, err = run(capsys, running, "resetOffsetByTime", "-g", group, "-t", topic,
                             "-s", "now")
        assert code == 1 and "online" in err and "nothing reset" in err and out == ""
        forced = ok_json(capsys, running, "resetOffsetByTime", "-g", group, "-t", topic,
                         "-s", "now", "-f")
        assert forced[0]["new_offset"] == 6
    finally:
        release.set()
        consumer.shutdown()


def test_cluster_wide_commands_go_on_past_an_unreachable_broker(
        capsys: pytest.CaptureFixture[str], running: RunningCluster) -> None:
    stopped = running.nodes["broker-b-1"]
    os.kill(int(stopped["pid"]), signal.SIGSTOP)
    try:
        for command in ("haStatus", "brokerStatus"):
            code, out, err = run(capsys, running, command, "-c", CLUSTER, "--timeout", "1")
            assert code == 0
            # Listed once: in the output, with why (not again on stderr).
            assert err == ""
            assert out.count("UNREACHABLE") == 1 and stopped["address"] in out
            assert running.addr("broker-a-0") in out
        code, out, _ = run(capsys, running, "haStatus", "-c", CLUSTER, "--timeout", "1",
                           "--json")
        listing = json.loads(out)
        assert [s.get("error") is not None for s in listing] == [False, False, False, True]
        assert listing[3]["broker_addr"] == stopped["address"]
    finally:
        os.kill(int(stopped["pid"]), signal.SIGCONT)
    # None answering (all down, or all refusing the credentials) is a failure: exit 1 after
    # the listing (a health check reading only the exit code saw success).
    brokers = [n for name, n in running.nodes.items() if name.startswith("broker-")]
    for node in brokers:
        os.kill(int(node["pid"]), signal.SIGSTOP)
    try:
        for command in ("haStatus", "brokerStatus"):
            code, out, err = run(capsys, running, command, "-c", CLUSTER, "--timeout", "1")
            assert code == 1, (command, out, err)
            assert out.count("UNREACHABLE") == len(brokers) and "no broker answered" in err
    finally:
        for node in brokers:
            os.kill(int(node["pid"]), signal.SIGCONT)


def test_brokers_that_do_not_answer_are_waited_for_at_once(
        capsys: pytest.CaptureFixture[str], running: RunningCluster) -> None:
    """Three SIGSTOPped brokers (alive, holding their ports, answering nothing) cost a
    command one --timeout, not one each: haStatus and brokerStatus by cluster and by a list
    of addresses, and clusterList, ask every broker at once."""
    timeout = 2.0
    frozen = ["broker-a-0", "broker-a-1", "broker-b-1"]
    addrs = ";".join(running.addr(n) for n in ("broker-a-0", "broker-a-1", "broker-b-0",
                                               "broker-b-1"))
    for name in frozen:
        os.kill(int(running.nodes[name]["pid"]), signal.SIGSTOP)
    try:
        for args in (["haStatus", "-c", CLUSTER], ["haStatus", "-b", addrs],
                     ["brokerStatus", "-b", addrs], ["brokerStatus", "-c", CLUSTER],
                     ["clusterList"]):
            started = time.monotonic()
            code, out, err = run(capsys, running, *args, "--timeout", str(timeout))
            took = time.monotonic() - started
            assert code == 0, (args, err)
            assert took < 1.8 * timeout, f"{args[0]} took {took:.1f} s ({err})"
            assert out.count("UNREACHABLE") == len(frozen), (args, out)
            if args[0] != "clusterList":  # the others: each once, in the output only
                assert err == "", (args, err)
            assert running.addr("broker-b-0") in out
    finally:
        for name in frozen:
            os.kill(int(running.nodes[name]["pid"]), signal.SIGCONT)


# -- errors ------------------------------------------------------------------------------------
def script(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The installed console script, as a person runs it."""
    return subprocess.run([str(MQADMIN_SCRIPT), *args], capture_output=True, text=True,
                          timeout=60, env=env, stdin=subprocess.DEVNULL)


@pytest.mark.parametrize(("args", "message"), [
    (["topicRoute", "-t", "NoSuchTopic"], "mqadmin topicRoute: topic NoSuchTopic not exist"),
    (["queryMsgById", "-i", "7F00000100000001" + "0" * 16],  # a broker at 127.0.0.1:1
     "mqadmin queryMsgById: "),
    (["consumerProgress", "-g", "NoSuchGroup"], "consumer group NoSuchGroup not exist"),
    (["sendMessage", "-t", "AdminSendX", "-p", "x", "-b", "broker-x"],
     "broker broker-x does not serve topic AdminSendX"),
    (["haStatus", "-c", "NoSuchCluster"], "cluster NoSuchCluster not found"),
])
def test_errors_are_one_line_and_exit_1(running: RunningCluster, args: list[str], message: str
                                        ) -> None:
    result = script(*args, "-n", running.namesrv)
    assert result.returncode == 1
    assert message in result.stderr and result.stderr.count("\n") == 1
    assert result.stdout == ""


def test_unreachable_or_missing_name_server(tmp_path: Path) -> None:
    result = script("clusterList", "-n", "127.0.0.1:1")
    assert result.returncode == 1 and result.stderr.count("\n") == 1
    assert result.stderr.startswith("mqadmin clusterList: no name server answered: "
                                    "name server 127.0.0.1:1: UNAVAILABLE")
    env = {k: v for k, v in os.environ.items() if k != "NAMESRV_ADDR"}
    result = script("topicList", env=env)
    assert result.returncode == 1
    assert result.stderr == ("mqadmin topicList: no name server address: give -n HOST:PORT "
                             "or set NAMESRV_ADDR\n")
    result = script("topicList", "-n", "nonsense")  # a bad argument: a usage error
    assert result.returncode == 2 and "is not HOST:PORT" in result.stderr


def test_name_server_from_environment(running: RunningCluster) -> None:
    result = script("topicList", "--json", env=dict(os.environ, NAMESRV_ADDR=running.namesrv))
    assert result.returncode == 0, result.stderr
    assert "TBW102" in json.loads(result.stdout)


@pytest.mark.parametrize("args", [["updateTopic"], ["updateTopic", "-t", "T", "-p", "3"],
                                  ["consumeMessage", "-t", "T", "-c", "0"], ["noSuchCommand"]])
def test_bad_arguments_exit_2(args: list[str]) -> None:
    result = script(*args, "-n", "127.0.0.1:1")
    assert result.returncode == 2 and "error:" in result.stderr
