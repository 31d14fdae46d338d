"""`mqcluster up|status|down` with real name server and broker processes on loopback, and
its layout / broker.conf generation."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest

from broker.config import read_properties
from mqclient.admin import MQAdmin
from mqclient.cli.local_cluster import (
    DEFAULT_NAMESRV_PORT,
    LAYOUT_FILE,
    NAMESRV_PORT_ENV,
    STATE_FILE,
    ProcessRecord,
    broker_conf,
    free_ports,
    group_name,
    is_alive,
    plan_layout,
    port_is_free,
    records_to_json,
)
from mqproto import messaging_pb2, messaging_pb2_grpc
from tests.support.ports import free_port
from tests.support.processes import LocalCluster, run_mqcluster
from tests.support.waiting import wait_until

SMALL_STORE = ("--set", "mappedFileSizeCommitLog=1048576", "--set", "maxHashSlotNum=1000",
               "--set", "maxIndexNum=4000")
GONE_TIMEOUT_S = 10.0


def pid_gone(pid: int) -> bool:
    """No process, or a zombie waiting for a parent that is not us."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat[stat.rindex(")") + 2] in "ZX"


def wait_gone(pids: list[int]) -> None:
    deadline = time.monotonic() + GONE_TIMEOUT_S
    while not all(pid_gone(p) for p in pids):
        assert time.monotonic() < deadline, f"still alive: {[p for p in pids if not pid_gone(p)]}"
        time.sleep(0.05)


def registered(namesrv_addr: str) -> dict[str, dict[int, str]]:
    with MQAdmin(namesrv_addr) as admin:
        return {g.broker_name: g.addrs for g in admin.cluster_info().groups.values()}


# -- layout (no process) -----------------------------------------------------------------------
def test_group_names_go_on_past_z() -> None:
    assert [group_name(i) for i in (0, 1, 25, 26, 27)] == [
        "broker-a", "broker-b", "broker-z", "broker-aa", "broker-ab"]


def test_plan_gives_each_broker_a_grpc_and_an_ha_port_and_slaves_their_master(
        tmp_path: Path) -> None:
    layout = plan_layout(groups=2, slaves=1, namesrvs=2, ports=range(20000, 20010),
                         flush="SYNC_FLUSH", role="SYNC_MASTER",
                         broker_props={"maxIndexNum": "4000"})
    assert layout.namesrv_addr == "127.0.0.1:20000;127.0.0.1:20001"
    assert [(n.name, n.port, n.ha_port) for n in layout.brokers] == [
        ("broker-a-0", 20002, 20003), ("broker-a-1", 20004, 20005),
        ("broker-b-0", 20006, 20007), ("broker-b-1", 20008, 20009)]
    master = read_properties(broker_conf(layout, layout.brokers[2], tmp_path))
    slave = read_properties(broker_conf(layout, layout.brokers[3], tmp_path))
    assert master["brokerRole"] == "SYNC_MASTER" and master["brokerId"] == "0"
    assert master["flushDiskType"] == "SYNC_FLUSH"
    assert master["namesrvAddr"] == layout.namesrv_addr
    assert master["storePathRootDir"] == str(tmp_path / "broker-b-0" / "store")
    assert slave["brokerRole"] == "SLAVE" and slave["brokerId"] == "1"
    assert slave["brokerName"] == "broker-b"
    assert slave["haMasterAddress"] == "127.0.0.1:20007"
    assert slave["maxIndexNum"] == "4000"  # --set reaches every broker


def send_channel_address(broker: str) -> str:
    with grpc.insecure_channel(broker) as channel:
        stub = messaging_pb2_grpc.MessagingServiceStub(channel)
        return stub.GetSendChannel(messaging_pb2.GetSendChannelRequest(), timeout=10).address


def test_plan_gives_each_broker_its_own_v2_port(tmp_path: Path) -> None:
    """grpcProxyPort is planned (listenPort + 3 may be another node's port here)."""
    layout = plan_layout(groups=1, slaves=1, namesrvs=1, ports=range(20000, 20005),
                         flush="ASYNC_FLUSH", role="ASYNC_MASTER", broker_props={},
                         v2_ports=[21000, 21001], send_ports=[22000, 22001],
                         remoting_ports=[23000, 23001])
    assert [n.v2_port for n in layout.brokers] == [21000, 21001]
    conf = read_properties(broker_conf(layout, layout.brokers[1], tmp_path))
    assert (conf["grpcProxyPort"], conf["sendListenPort"], conf["remotingPort"]) == (
        "21001", "22001", "23001")


# -- real processes ----------------------------------------------------------------------------
def test_default_shape_up_status_down(tmp_path: Path) -> None:
    directory = tmp_path / "c"
    cluster = LocalCluster(directory, *SMALL_STORE)
    with cluster:
        out = cluster.up_result.stdout
        assert f"NAMESRV_ADDR={cluster.namesrv_addr}" in out
        assert f"down --dir {directory}" in out
        assert [(p["name"], p["alive"], p["registered"]) for p in cluster.processes] == [
            ("namesrv-0", True, None), ("broker-a-0", True, True)]
        broker = cluster.addresses()[0]
        assert registered(cluster.namesrv_addr) == {"broker-a": {0: broker}}
        send_channel = send_channel_address(broker)
        with MQAdmin(cluster.namesrv_addr) as admin:
            sent = admin.send_message("KeptTopic", b"survives down and up")
        # The processes are detached from mqcluster, which has exited.
        assert all(not pid_gone(p["pid"]) for p in cluster.processes)

        again = cluster.mqcluster("up")
        assert "already running" in again.stdout and again.stderr == ""
        # Options for a new cluster are not applied to the running one: said, and checked
        # all the same (a value the brokers would refuse is a usage error).
        again = cluster.mqcluster("up", "--groups", "2", "--set", "flushIntervalCommitLog=200",
                                  "--no-metrics")
        assert "already running" in again.stdout
        assert again.stderr.startswith("mqcluster: not applied: --groups 2, --set "
                                       "flushIntervalCommitLog=200, --no-metrics (the cluster "
                                       f"in {directory} is already running;")
        refused = cluster.mqcluster("up", "--set", "listenPort=abc", check=False)
        assert refused.returncode == 2, refused
        assert refused.stderr.count("\n") == 1 and "Traceback" not in refused.stderr
        assert "listenPort: expected an integer, got 'abc'" in refused.stderr

        table = cluster.mqcluster("status").stdout
        assert "broker-a-0" in table and "alive" in table and "DEAD" not in table
        assert broker in table
        frozen = cluster.processes[1]["pid"]
        os.kill(frozen, signal.SIGSTOP)  # alive, holding its ports, answering nothing
        try:
            wait_until(lambda: "stopped" in cluster.mqcluster("status", check=False).stdout,
                       timeout=10, message="status shows the stopped broker")
        finally:
            os.kill(frozen, signal.SIGCONT)

        stopped = cluster.down()
        assert stopped is not None and "stopped 2 process(es)" in stopped.stdout
        assert "SIGKILL" not in stopped.stdout  # both exited on SIGTERM
        wait_gone([p["pid"] for p in cluster.processes])
        assert not (directory / STATE_FILE).exists()
        assert (directory / "broker-a-0" / "store" / "commitlog").is_dir()  # data kept

        after = cluster.mqcluster("status", check=False)
        assert after.returncode == 1 and "no cluster is running" in after.stdout

        # The next up in the directory reuses its shape, ports and data.
        cluster.mqcluster("up")
        with MQAdmin(cluster.namesrv_addr) as admin:
            assert registered(cluster.namesrv_addr) == {"broker-a": {0: broker}}
            kept = admin.consume_messages("KeptTopic")
        assert [(m.body, m.offset_msg_id) for m in kept] == [
            (b"survives down and up", sent.offset_msg_id)]
        assert send_channel_address(broker) == send_channel  # a trial saw it move
        cluster.down("--clean")
        assert not directory.exists()


def test_full_shape_registers_two_masters_and_two_slaves(tmp_path: Path) -> None:
    directory = tmp_path / "full"
    with LocalCluster(directory, "--groups", "2", "--slaves", "1", "--namesrvs", "2",
                      *SMALL_STORE) as cluster:
        brokers = {p["name"]: p for p in cluster.processes if p["kind"] == "broker"}
        assert sorted(brokers) == ["broker-a-0", "broker-a-1", "broker-b-0", "broker-b-1"]
        assert [brokers[n]["role"] for n in sorted(brokers)] == [
            "ASYNC_MASTER", "SLAVE", "ASYNC_MASTER", "SLAVE"]
        for namesrv in cluster.addresses("namesrv"):  # each name server has all four
            assert registered(namesrv) == {
                "broker-a": {0: brokers["broker-a-0"]["address"],
                             1: brokers["broker-a-1"]["address"]},
                "broker-b": {0: brokers["broker-b-0"]["address"],
                             1: brokers["broker-b-1"]["address"]}}
        listed = subprocess.run(
            [sys.executable, "-m", "mqclient.cli.mqadmin", "clusterList", "-n",
             cluster.namesrv_addr, "--json"], capture_output=True, text=True, check=True)
        roles = sorted((r["broker_name"], r["broker_id"], r["role"])
                       for r in json.loads(listed.stdout))
        assert roles == [("broker-a", 0, "ASYNC_MASTER"), ("broker-a", 1, "SLAVE"),
                         ("broker-b", 0, "ASYNC_MASTER"), ("broker-b", 1, "SLAVE")]

        # A process that died shows as DEAD; up starts it again as it was.
        victim = brokers["broker-b-1"]
        os.kill(victim["pid"], signal.SIGKILL)
        wait_gone([victim["pid"]])
        status = cluster.mqcluster("status", check=False)
        assert status.returncode == 1
        dead_line = next(line for line in status.stdout.splitlines() if "broker-b-1" in line)
        assert "DEAD" in dead_line
        restarted = cluster.mqcluster("up")
        assert "restarting broker-b-1" in restarted.stdout and "DEAD" not in restarted.stdout
        now = {p["name"]: p for p in json.loads(cluster.mqcluster("status", "--json").stdout)}
        assert now["broker-b-1"]["pid"] != victim["pid"] and now["broker-b-1"]["alive"]
        assert now["broker-b-1"]["address"] == victim["address"]
        assert now["broker-a-0"]["pid"] == brokers["broker-a-0"]["pid"]  # the others untouched

        cluster.down("--clean")
        wait_gone([p["pid"] for p in now.values()])
        assert not directory.exists()


def test_port_taken_fails_clearly_and_starts_nothing(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "-m", "mqclient.cli.mqcluster", "up", "--dir",
             str(tmp_path / "c"), "--base-port", str(port - 1)],
            capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1
    assert f"port {port} of broker-a-0 is taken" in result.stderr
    assert not (tmp_path / "c").exists()


def test_the_name_server_is_at_9876_when_free_and_up_says_where_it_is_when_not(
        tmp_path: Path) -> None:
    """A person's `up` (no MQCLUSTER_NAMESRV_PORT, unlike the other tests') puts the name
    server at RocketMQ's 127.0.0.1:9876, the examples' address; a second cluster in another
    directory, with 9876 taken, still starts and says where its name server is instead."""
    person = {k: v for k, v in os.environ.items() if k != NAMESRV_PORT_ENV}
    default_addr = f"127.0.0.1:{DEFAULT_NAMESRV_PORT}"
    clusters: list[LocalCluster] = []
    try:
        if port_is_free(DEFAULT_NAMESRV_PORT):  # else another program has it: the 2nd case
            clusters.append(LocalCluster(tmp_path / "first", "--no-metrics", env=person))
            assert clusters[0].namesrv_addr == default_addr
            out = clusters[0].up_result.stdout
            assert f"NAMESRV_ADDR={default_addr}\n" in out and "NOTE" not in out
            assert "broker-a" in registered(default_addr)
        clusters.append(LocalCluster(tmp_path / "second", "--no-metrics", env=person))
        second = clusters[-1]
        assert second.namesrv_addr != default_addr
        assert (f"NOTE: port {DEFAULT_NAMESRV_PORT} was taken (another cluster or program "
                f"listens there), so this cluster's name server is at {second.namesrv_addr}, "
                f"not at the examples' {default_addr}") in second.up_result.stdout
        assert "broker-a" in registered(second.namesrv_addr)
    finally:
        for cluster in clusters:
            cluster.down("--clean")


def test_namesrv_port_option_and_a_kept_port_taken_since(tmp_path: Path) -> None:
    """--namesrv-port P puts the name server at P; when P is taken at a later up, which keeps
    the directory's ports, the name server moves to a free port (said in the listing) rather
    than failing, unless P is asked for again (one line, exit 1)."""
    directory = tmp_path / "c"
    port = free_port()
    with LocalCluster(directory, "--no-metrics", "--namesrv-port", str(port)) as cluster:
        assert cluster.namesrv_addr == f"127.0.0.1:{port}"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", port))
        taken.listen()
        with LocalCluster(directory, "--no-metrics") as cluster:
            assert cluster.namesrv_addr not in ("", f"127.0.0.1:{port}")
            assert f"NAMESRV_ADDR={cluster.namesrv_addr}" in cluster.up_result.stdout
            assert "broker-a" in registered(cluster.namesrv_addr)
        refused = run_mqcluster(directory, "up", "--namesrv-port", str(port), check=False)
    assert refused.returncode == 1 and refused.stderr == (
        f"mqcluster up: port {port} (--namesrv-port or {NAMESRV_PORT_ENV}) is taken; choose "
        "another, or 0 for any free port\n")
    bad = run_mqcluster(directory, "up", check=False,
                        env={**os.environ, NAMESRV_PORT_ENV: "nine"})
    assert bad.returncode == 1 and f"{NAMESRV_PORT_ENV}='nine': expected a port" in bad.stderr


def test_down_leaves_alone_a_pid_that_is_no_longer_ours(tmp_path: Path) -> None:
    """A recorded PID now belonging to another program (PID reuse) is not signalled."""
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        directory = tmp_path / "c"
        directory.mkdir()
        layout = plan_layout(groups=1, slaves=0, namesrvs=1, ports=[1, 2, 3],
                             flush="ASYNC_FLUSH", role="ASYNC_MASTER", broker_props={})
        forged = ProcessRecord("broker-a-0", other.pid, 1, [sys.executable, "-m", "broker"],
                               "logs/broker-a-0.log")
        assert not is_alive(forged)
        (directory / STATE_FILE).write_text(json.dumps({
            "layout": layout.to_json(), "processes": records_to_json([forged])}))
        (directory / LAYOUT_FILE).write_text(json.dumps(layout.to_json()))
        result = subprocess.run(
            [sys.executable, "-m", "mqclient.cli.mqcluster", "down", "--dir", str(directory)],
            capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, result.stderr
        assert "stopped 0 process(es)" in result.stdout
        assert other.poll() is None  # still running
    finally:
        other.kill()
        other.wait()


def test_bad_set_option_is_a_usage_error(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "mqclient.cli.mqcluster", "up", "--dir", str(tmp_path / "c"),
         "--set", "novalue"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert result.stderr.endswith("mqcluster up: error: argument --set: 'novalue': expected "
                                  "KEY=VALUE (a broker.conf key)\n")
    # A value the brokers refuse: a usage error naming it; nothing is left running.
    result = subprocess.run(
        [sys.executable, "-m", "mqclient.cli.mqcluster", "up", "--dir", str(tmp_path / "c"),
         "--set", "listenPort=abc"], capture_output=True, text=True, timeout=120,
        env=dict(os.environ, **{NAMESRV_PORT_ENV: "0"}))
    assert result.returncode == 2, result
    assert result.stderr.startswith("mqcluster up: error: broker-a-0 refused its "
                                    "configuration")
    assert "listenPort: expected an integer, got 'abc'" in result.stderr
    assert result.stderr.count("\n") == 1
    assert not (tmp_path / "c" / STATE_FILE).exists()


@pytest.mark.parametrize("args", [["up", "--groups", "0"], ["up", "--flush", "NONE"],
                                  ["sideways"], ["up", "--groups", "100000"],
                                  ["up", "--slaves", "99"], ["up", "--namesrvs", "0"],
                                  ["up", "--base-port", "70000"], ["up", "--timeout", "nan"],
                                  ["down", "--timeout", "-1"], ["status", "--timeout", "1e308"]])
def test_bad_arguments_exit_2(tmp_path: Path, args: list[str]) -> None:
    result = subprocess.run([sys.executable, "-m", "mqclient.cli.mqcluster", *args, "--dir",
                             str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "error:" in result.stderr and "Traceback" not in result.stderr


def test_a_failure_to_start_says_what_failed(tmp_path: Path) -> None:
    """Out of file descriptors (each port is reserved with a socket): one line naming what
    could not be done, not a bare "[Errno 24] Too many open files"."""
    import resource

    def few_files() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))

    result = subprocess.run(
        [sys.executable, "-m", "mqclient.cli.mqcluster", "up", "--dir", str(tmp_path / "c"),
         "--groups", "26", "--slaves", "4"], capture_output=True, text=True, timeout=60,
        preexec_fn=few_files, env=dict(os.environ, **{NAMESRV_PORT_ENV: "0"}))
    assert result.returncode == 1, result
    assert result.stderr.startswith("mqcluster up: cannot reserve "), result.stderr
    assert "free ports on 127.0.0.1" in result.stderr and result.stderr.count("\n") == 1


def test_clean_keeps_data_outside_the_directory_and_says_so(tmp_path: Path) -> None:
    directory = tmp_path / "c"
    outside = tmp_path / "elsewhere"
    (outside / "commitlog").mkdir(parents=True)
    layout = plan_layout(groups=1, slaves=0, namesrvs=1, ports=[1, 2, 3],
                         flush="ASYNC_FLUSH", role="ASYNC_MASTER",
                         broker_props={"storePathRootDir": str(outside)})
    (directory / "broker-a-0").mkdir(parents=True)
    (directory / LAYOUT_FILE).write_text(json.dumps(layout.to_json()))
    result = subprocess.run(
        [sys.executable, "-m", "mqclient.cli.mqcluster", "down", "--dir", str(directory),
         "--clean"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert not directory.exists() and (outside / "commitlog").is_dir()
    assert (f"kept the brokers' data in {outside} (--set storePathRootDir: outside "
            f"{directory}, not removed by --clean") in result.stdout


def test_down_kills_a_recorded_process_that_ignores_sigterm(tmp_path: Path) -> None:
    stubborn = subprocess.Popen(
        [sys.executable, "-c", "import signal, sys, time\n"
         "signal.signal(signal.SIGTERM, signal.SIG_IGN)\nprint('ready', flush=True)\n"
         "time.sleep(60)"], stdout=subprocess.PIPE, text=True)
    try:
        assert stubborn.stdout is not None and stubborn.stdout.readline() == "ready\n"
        stat = Path(f"/proc/{stubborn.pid}/stat").read_text()
        start_time = int(stat[stat.rindex(")") + 2:].split()[19])
        argv = Path(f"/proc/{stubborn.pid}/cmdline").read_bytes().decode().split("\0")[:-1]
        record = ProcessRecord("broker-a-0", stubborn.pid, start_time, argv,
                               "logs/broker-a-0.log")
        assert is_alive(record)
        directory = tmp_path / "c"
        directory.mkdir()
        layout = plan_layout(groups=1, slaves=0, namesrvs=1, ports=[1, 2, 3],
                             flush="ASYNC_FLUSH", role="ASYNC_MASTER", broker_props={})
        (directory / STATE_FILE).write_text(json.dumps({
            "layout": layout.to_json(), "processes": records_to_json([record])}))
        result = subprocess.run(
            [sys.executable, "-m", "mqclient.cli.mqcluster", "down", "--dir", str(directory),
             "--timeout", "0.5"], capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, result.stderr
        assert "stopped 1 process(es), 1 of them with SIGKILL" in result.stdout
        assert stubborn.wait(timeout=10) == -signal.SIGKILL
        assert not (directory / STATE_FILE).exists()
    finally:
        if stubborn.poll() is None:
            stubborn.kill()
        stubborn.wait()
        if stubborn.stdout is not None:
            stubborn.stdout.close()


def test_a_tls_and_acl_cluster_says_what_clients_need_at_every_up(tmp_path: Path) -> None:
    """`up --tls --acl`: the exports mqadmin and clients need come before the hint to try
    mqadmin (which fails without them), and again at a later `up` (which keeps TLS and
    ACL); with them, mqadmin works."""
    directory = tmp_path / "secure"
    with LocalCluster(directory, "--tls", "--acl", *SMALL_STORE) as cluster:
        ca = directory / "security" / "tls" / "ca.pem"
        credentials = directory / "security" / "credentials.env"
        tls_hint = f"TLS on: export MQ_TLS_CA={ca}"
        acl_hint = f"ACL on: export $(cat {credentials})"
        out = cluster.up_result.stdout
        assert out.index(tls_hint) < out.index("Try:") and out.index(acl_hint) < out.index("Try:")
        env = dict(os.environ, MQ_TLS_CA=str(ca))
        env.update(line.split("=", 1) for line in credentials.read_text().split())
        listed = subprocess.run(
            [sys.executable, "-m", "mqclient.cli.mqadmin", "clusterList", "-n",
             cluster.namesrv_addr], env=env, capture_output=True, text=True, timeout=60,
            stdin=subprocess.DEVNULL)
        assert listed.returncode == 0, listed.stderr
        again = cluster.mqcluster("up").stdout
        assert "already running" in again and tls_hint in again and acl_hint in again


def test_free_ports_lie_below_the_ephemeral_range() -> None:
    """A port bind(0) hands out may go to an outgoing connection before the server binds it
    (test clusters side by side lost brokers that way): picks come from below that range."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    ports = free_ports(200)
    assert len(set(ports)) == 200
    assert all(10_000 <= p < low for p in ports)
    assert all(port_is_free(p) for p in ports)
