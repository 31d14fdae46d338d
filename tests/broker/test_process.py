"""Real `python -m nameserver` and `python -m broker` processes on free loopback ports:
10,000 messages, long polling, restarts after SIGTERM and SIGKILL."""

from __future__ import annotations

import ipaddress
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from broker.startup import config_overrides, parse_args
from mqproto import (
    admin_pb2,
    admin_pb2_grpc,
    common_pb2,
    messaging_pb2,
    messaging_pb2_grpc,
    namesrv_pb2,
    namesrv_pb2_grpc,
)
from tests.support.brokers import (
    RPC_TIMEOUT_S,
    broker_props,
    create_topic,
    pull_everything,
    write_conf,
)
from tests.support.processes import REPO_ROOT, Process, Processes, child_env, send_garbage
from tests.support.waiting import wait_until

M = messaging_pb2
C = common_pb2
TAGS = ("TagA", "TagB", "TagC")
COMMITLOG_FILE_SIZE = 1024 * 1024  # 10,000 messages fill several files


class Cluster:
    """One name server and one broker process; the broker can be stopped and restarted on
    the same port and store."""

    def __init__(self, processes: Processes, tmp_path: Path, **props: object) -> None:
        self.processes = processes
        self.namesrv = processes.namesrv()
        self.props = broker_props(tmp_path / "store", namesrvAddr=self.namesrv.address,
                                  **props)
        self.conf = tmp_path / "broker.conf"
        self.broker: Process = self.start_broker()
        # The same listenPort on restart; the ports derived from it (listenPort + 1..4) were
        # never this broker's, and another socket may hold one (a fresh run failed so on the
        # v2 port): any free port for HA and the send channel, the v2 endpoint off.
        self.props.update(listenPort=self.broker.address.rpartition(":")[2],
                          haListenPort="0", sendListenPort="0", grpcProxyPort="0",
                          remotingPort="0")

    def start_broker(self) -> Process:
        broker = self.processes.broker(write_conf(self.conf, self.props))
        self.channel = grpc.insecure_channel(broker.address)
        self.messaging = messaging_pb2_grpc.MessagingServiceStub(self.channel)
        self.admin = admin_pb2_grpc.AdminServiceStub(self.channel)
        return broker

    def stop(self, signum: int) -> int:
        self.channel.close()
        return self.broker.stop(signum)

    def restart(self, signum: int) -> int:
        code = self.stop(signum)
        self.broker = self.start_broker()
        return code

    def route(self, topic: str) -> namesrv_pb2.GetRouteInfoByTopicResponse:
        with grpc.insecure_channel(self.namesrv.address) as channel:
            return namesrv_pb2_grpc.NamesrvServiceStub(channel).GetRouteInfoByTopic(
                namesrv_pb2.GetRouteInfoByTopicRequest(topic=topic), timeout=RPC_TIMEOUT_S)

    def close(self) -> None:
        self.channel.close()


@pytest.fixture
def cluster(processes: Processes, tmp_path: Path, request: pytest.FixtureRequest
            ) -> Iterator[Cluster]:
    """A name server and a broker; a test parametrized with `flush_disk_type` picks it."""
    flush = getattr(request, "param", "ASYNC_FLUSH")
    c = Cluster(processes, tmp_path, flushConsumerOffsetInterval=200,
                mappedFileSizeCommitLog=COMMITLOG_FILE_SIZE, flushDiskType=flush)
    try:
        yield c
    finally:
        c.close()


def body(i: int) -> bytes:
    return b"message-%06d-" % i + b"x" * (i % 200)


def pull_queue(c: Cluster, topic: str, queue_id: int, sub: str = "*", group: str = "CG"
               ) -> list[messaging_pb2.Message]:
    return pull_everything(c.messaging, topic, queue_id, sub, group)


def wait_dispatched(c: Cluster, topic: str, queue_id: int, count: int) -> None:
    wait_until(lambda: c.messaging.GetMaxOffset(M.GetMaxOffsetRequest(
        topic=topic, queue_id=queue_id), timeout=RPC_TIMEOUT_S).offset >= count,
        message=f"{count} messages dispatched to {topic}-{queue_id}")


def test_send_and_pull_10000_messages(cluster: Cluster) -> None:
    c = cluster
    create_topic(c, "Big", 4)
    sent: dict[int, list[tuple[int, bytes, str]]] = {q: [] for q in range(4)}  # i, body, tag
    i = 0
    while i < 9000:  # batches: one store append each
        queue_id = (i // 100) % 4
        msgs = [M.Message(body=body(j), tag=TAGS[j % 3], keys=[f"key-{j}"])
                for j in range(i, i + 100)]
        r = c.messaging.SendBatch(M.SendBatchRequest(topic="Big", queue_id=queue_id,
                                                     messages=msgs), timeout=RPC_TIMEOUT_S)
        assert r.status.code == C.SUCCESS, r.status
        first = r.results[0].queue_offset
        assert [x.queue_offset for x in r.results] == list(range(first, first + 100))
        sent[queue_id].extend((j, body(j), TAGS[j % 3]) for j in range(i, i + 100))
        i += 100
    send_garbage(c.broker.address, bytes(range(256)) * 64)
    while i < 10_000:  # and single sends
        queue_id = i % 4
        r = c.messaging.SendMessage(M.SendMessageRequest(
            message=M.Message(topic="Big", body=body(i), tag=TAGS[i % 3], keys=[f"key-{i}"]),
            queue_id=queue_id), timeout=RPC_TIMEOUT_S)
        assert r.status.code == C.SUCCESS, r.status
        assert r.result.queue_offset == len(sent[queue_id])
        sent[queue_id].append((i, body(i), TAGS[i % 3]))
        i += 1

    for queue_id in range(4):
        wait_dispatched(c, "Big", queue_id, len(sent[queue_id]))
        got = pull_queue(c, "Big", queue_id)
        assert [(m.body, m.tag) for m in got] == [(b, t) for _, b, t in sent[queue_id]]
        assert [m.system_properties.queue_offset for m in got] == list(range(len(got)))
        filtered = pull_queue(c, "Big", queue_id, sub="TagA || TagC")
        assert [m.body for m in filtered] == [b for _, b, t in sent[queue_id] if t != "TagB"]
        mx = c.messaging.GetMaxOffset(M.GetMaxOffsetRequest(topic="Big", queue_id=queue_id))
        mn = c.messaging.GetMinOffset(M.GetMinOffsetRequest(topic="Big", queue_id=queue_id))
        assert (mn.offset, mx.offset) == (0, len(sent[queue_id]))
    assert sum(len(v) for v in sent.values()) == 10_000

    # The commitlog rolled over its files; a key lookup still finds its message.
    info = c.admin.GetRuntimeInfo(admin_pb2.GetRuntimeInfoRequest(), timeout=RPC_TIMEOUT_S)
    assert info.commit_log_max_offset > 2 * COMMITLOG_FILE_SIZE
    found = c.messaging.QueryMessageByKey(M.QueryMessageByKeyRequest(topic="Big", key="key-4321"))
    assert [m.body for m in found.messages] == [body(4321)]
    # The name server routes the topic to this broker.
    route = c.route("Big")
    assert route.status.code == C.SUCCESS
    assert route.topic_route_data.broker_datas[0].broker_addrs[0] == c.broker.address


def test_long_poll_returns_within_100ms_of_a_send(cluster: Cluster) -> None:
    c = cluster
    create_topic(c, "Poll", 2)
    latencies = []
    for n in range(5):
        future = c.messaging.PullMessage.future(M.PullMessageRequest(
            consumer_group="CG", topic="Poll", queue_id=1, queue_offset=n,
            suspend_timeout_millis=15_000), timeout=30)
        time.sleep(0.2)
        assert not future.done()
        begin = time.monotonic()
        r = c.messaging.SendMessage(M.SendMessageRequest(
            message=M.Message(topic="Poll", body=b"%d" % n), queue_id=1), timeout=RPC_TIMEOUT_S)
        assert r.status.code == C.SUCCESS
        result = future.result()
        latencies.append(time.monotonic() - begin)
        assert result.status.code == C.SUCCESS and [m.body for m in result.messages] == [
            b"%d" % n]
    assert max(latencies) < 0.1, latencies


def test_sigterm_restart_keeps_messages_and_offsets(cluster: Cluster) -> None:
    c = cluster
    create_topic(c, "Keep", 2)
    for i in range(200):
        r = c.messaging.SendMessage(M.SendMessageRequest(
            message=M.Message(topic="Keep", body=body(i), tag=TAGS[i % 3]), queue_id=i % 2),
            timeout=RPC_TIMEOUT_S)
        assert r.status.code == C.SUCCESS
    wait_dispatched(c, "Keep", 1, 100)
    for queue_id, offset in ((0, 40), (1, 100)):
        r = c.messaging.UpdateConsumerOffset(M.UpdateConsumerOffsetRequest(
            consumer_group="CG", topic="Keep", queue_id=queue_id, commit_offset=offset))
        assert r.status.code == C.SUCCESS

    assert c.route("Keep").status.code == C.SUCCESS
    assert c.stop(signal.SIGTERM) == 0  # committed offsets persist at shutdown
    assert c.route("Keep").status.code == C.TOPIC_NOT_EXIST  # unregistered at once
    text = c.broker.log_text()
    assert "received SIGTERM" in text and "unregisterBroker from name server" in text
    assert not (c.processes.tmp_path / "store" / "abort").exists()  # a clean stop
    c.broker = c.start_broker()
    assert "recovered from a crash" not in c.broker.log_text()

    for queue_id, offset in ((0, 40), (1, 100)):
        q = c.messaging.QueryConsumerOffset(M.QueryConsumerOffsetRequest(
            consumer_group="CG", topic="Keep", queue_id=queue_id), timeout=RPC_TIMEOUT_S)
        assert (q.status.code, q.offset) == (C.SUCCESS, offset)
    for queue_id in range(2):
        got = pull_queue(c, "Keep", queue_id)
        assert [m.body for m in got] == [body(i) for i in range(queue_id, 200, 2)]
    # Registered again: the route is back.
    route = c.route("Keep")
    assert route.status.code == C.SUCCESS


@pytest.mark.parametrize("cluster", ["ASYNC_FLUSH", "SYNC_FLUSH"], indirect=True)
def test_sigkill_loses_nothing_acknowledged(cluster: Cluster) -> None:
    c = cluster
    create_topic(c, "Crash", 4)
    acked: list[tuple[int, int, bytes, str]] = []  # queue, queue offset, body, offsetMsgId
    stop = threading.Event()
    errors: list[BaseException] = []

    def producer() -> None:
        channel = grpc.insecure_channel(c.broker.address)
        stub = messaging_pb2_grpc.MessagingServiceStub(channel)
        i = 0
        try:
            while not stop.is_set():
                queue_id = i % 4
                msgs = [M.Message(body=body(i + k)) for k in range(5)]
                r = stub.SendBatch(M.SendBatchRequest(topic="Crash", queue_id=queue_id,
                                                      messages=msgs), timeout=5)
                assert r.status.code == C.SUCCESS, r.status
                acked.extend((queue_id, x.queue_offset, m.body, x.offset_msg_id)
                             for x, m in zip(r.results, msgs, strict=True))
                i += 5
        except grpc.RpcError:
            pass  # the broker was killed under us: that send is not acknowledged
        except BaseException as e:
            errors.append(e)
        finally:
            channel.close()

    thread = threading.Thread(target=producer)
    thread.start()
    wait_until(lambda: len(acked) >= 2000, timeout=30, message="2000 acknowledged messages")
    r = c.messaging.UpdateConsumerOffset(M.UpdateConsumerOffsetRequest(
        consumer_group="CG", topic="Crash", queue_id=0, commit_offset=10))
    assert r.status.code == C.SUCCESS
    time.sleep(0.5)  # > flushConsumerOffsetInterval (200 ms): the offset is on disk
    assert c.restart(signal.SIGKILL) == -signal.SIGKILL
    stop.set()
    thread.join(10)
    assert not errors, errors
    assert "recovered from a crash" in c.broker.log_text()

    stored: dict[int, dict[int, bytes]] = {}
    for queue_id in range(4):
        stored[queue_id] = {m.system_properties.queue_offset: m.body
                            for m in pull_queue(c, "Crash", queue_id)}
    missing = [(q, o) for q, o, b, _ in acked if stored[q].get(o) != b]
    assert not missing, f"{len(missing)} of {len(acked)} acknowledged messages lost"
    for _, _, b, msg_id in acked[:: max(1, len(acked) // 20)]:
        got = c.messaging.QueryMessageById(M.QueryMessageByIdRequest(offset_msg_id=msg_id))
        assert got.message.body == b
    q = c.messaging.QueryConsumerOffset(M.QueryConsumerOffsetRequest(
        consumer_group="CG", topic="Crash", queue_id=0), timeout=RPC_TIMEOUT_S)
    assert (q.status.code, q.offset) == (C.SUCCESS, 10)
    # And the broker takes new messages after the crash.
    r = c.messaging.SendMessage(M.SendMessageRequest(
        message=M.Message(topic="Crash", body=b"after"), queue_id=0), timeout=RPC_TIMEOUT_S)
    assert r.status.code == C.SUCCESS and r.result.queue_offset == len(stored[0])


def test_a_conf_without_broker_name_or_name_server_is_refused(tmp_path: Path) -> None:
    """Misspelt keys only: each warned about, then exit 1 naming the keys a broker needs,
    before anything is created (no store under the home directory)."""
    conf = tmp_path / "broker.conf"
    conf.write_text("brokername=broker-a\nnamesrvaddr=127.0.0.1:9876\n"
                    f"storePathRootDir={tmp_path / 'store'}\n")
    done = subprocess.run([sys.executable, "-m", "broker", "-c", str(conf)], cwd=REPO_ROOT,
                          env={**child_env(), "NAMESRV_ADDR": ""}, capture_output=True,
                          text=True, timeout=30, stdin=subprocess.DEVNULL)
    assert done.returncode == 1 and done.stdout == ""
    lines = done.stderr.splitlines()
    assert [line.split(" - ", 1)[1] for line in lines] == [
        f"unknown key brokername in {conf} ignored",
        f"unknown key namesrvaddr in {conf} ignored",
        f"bad configuration: {conf} sets none of the keys a broker cannot default, so it does "
        "not start: brokerName=NAME (else this host's name); namesrvAddr=HOST:PORT;HOST:PORT, "
        "-n or $NAMESRV_ADDR (else no name server knows the broker and no client finds it); "
        "its unknown keys: brokername, namesrvaddr (key names are case-sensitive, as "
        "RocketMQ's)"]
    assert not (tmp_path / "store").exists()


def _listening_sockets(pid: int) -> set[tuple[str, int]]:
    """(IPv4 or IPv6 address, port) of every listening TCP socket the process holds."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = fd.readlink()
        except OSError:
            continue
        if str(target).startswith("socket:["):
            inodes.add(str(target)[8:-1])
    found = set()
    for table, width in (("tcp", 8), ("tcp6", 32)):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state != "0A" or inode not in inodes:  # 0A: LISTEN
                continue
            host_hex, port_hex = local.split(":")
            raw = bytes.fromhex(host_hex)
            # /proc prints each 32-bit word in host (little-endian) order.
            host = b"".join(raw[i:i + 4][::-1] for i in range(0, width // 2, 4))
            ip = ipaddress.ip_address(host)
            mapped = getattr(ip, "ipv4_mapped", None)  # gRPC's [::ffff:127.0.0.1]
            found.add((str(mapped or ip), int(port_hex, 16)))
    return found


@pytest.mark.parametrize("bind", ["127.0.0.1", None])
def test_every_port_listens_on_bind_address_and_the_boot_log_says_where(
        processes: Processes, tmp_path: Path, bind: str | None) -> None:
    """gRPC, HA, send channel, remoting (4.x clients), metrics and v2 ports all listen on
    bindAddress (default 0.0.0.0, every interface), and the broker's log says so next to
    the address clients are given (127.0.0.1, brokerIP1), which alone read as if it served
    on loopback only."""
    props = broker_props(tmp_path / "store", metricsPort=-1, grpcProxyPort=0,
                         namesrvAddr="127.0.0.1:1")
    if bind is None:
        del props["bindAddress"]
    props.pop("grpcProxyPort")  # listenPort 0: the v2 endpoint on a free port
    broker = processes.broker(write_conf(tmp_path / "broker.conf", props))
    log = broker.log_text()
    listening = re.search(r"serving on 127\.0\.0\.1:(\d+) \(listening on ([\d.]+): gRPC "
                          r"(\d+), HA (\d+), send channel (\d+), remoting (\d+), metrics (\d+)\)",
                          log)
    v2 = re.search(r"apache\.rocketmq\.v2 .* on 127\.0\.0\.1:(\d+) \(listening on "
                   r"([\d.]+):(\d+)\)", log)
    assert listening is not None and v2 is not None, log
    want = bind or "0.0.0.0"
    assert listening[2] == v2[2] == want
    ports = {int(p) for p in listening.groups()[2:]} | {int(v2[3])}
    assert int(listening[1]) == int(listening[3]) and len(ports) == 6
    assert f"HA service listening on {want}:{listening[4]}" in log
    held = _listening_sockets(broker.pid)
    # gRPC listens on "[::]" for 0.0.0.0 (dual stack); asyncio's servers on 0.0.0.0.
    anywhere = {"0.0.0.0", "::"}
    assert {p for _, p in held} == ports, (held, ports)
    assert all(h in ({want} if bind else anywhere) for h, _ in held), held


@pytest.mark.parametrize(("props", "error"), [
    ({"listenPort": "port"}, "listenPort: expected an integer"),
    ({"brokerRole": "SLAVE"}, "a SLAVE's brokerId must be > 0"),
])
def test_bad_config_exits_1(tmp_path: Path, props: dict[str, str], error: str) -> None:
    conf = write_conf(tmp_path / "bad.conf", broker_props(tmp_path / "s", **props))
    done = subprocess.run([sys.executable, "-m", "broker", "-c", str(conf)], cwd=REPO_ROOT,
                          env=child_env(), capture_output=True, text=True, timeout=30)
    assert done.returncode == 1 and error in done.stderr, done.stderr


def test_set_keys_on_the_command_line_win_over_the_file() -> None:
    args = parse_args(["-c", "b.conf", "--set", "listenPort=10921", "--set",
                       " brokerIP1 = 127.0.0.1 ", "--set", "namesrvAddr=a:1", "-n", "b:2"])
    assert config_overrides(args) == {"listenPort": "10921", "brokerIP1": "127.0.0.1",
                                      "namesrvAddr": "b:2"}


@pytest.mark.parametrize(("args", "code", "error"), [
    (["--set", "listenPort=port"], 1, "listenPort: expected an integer"),
    (["--set", "brokerRole=SLAVE"], 1, "a SLAVE's brokerId must be > 0"),
    (["--set", "listenPort"], 2, "expected KEY=VALUE"),
])
def test_set_keys_are_checked_like_the_file(tmp_path: Path, args: list[str], code: int,
                                            error: str) -> None:
    conf = write_conf(tmp_path / "good.conf", broker_props(tmp_path / "s"))
    done = subprocess.run([sys.executable, "-m", "broker", "-c", str(conf), *args],
                          cwd=REPO_ROOT, env=child_env(), capture_output=True, text=True,
                          timeout=30)
    assert done.returncode == code and error in done.stderr, done.stderr
