"""The local cluster of `mqcluster`: its layout (processes, ports, broker.conf files), the
state file of what runs, and starting / checking / stopping those processes by PID.

A directory holds everything:

    DIR/mqcluster.layout.json   shape and ports of the last `up` (kept, reused by the next)
    DIR/mqcluster.state.json    PIDs of the running processes (removed by `down`)
    DIR/prometheus.yml          a Prometheus scrape config of every process's /metrics
    DIR/logs/NAME.log           stdout + stderr of each process
    DIR/broker-a-0/broker.conf  one directory per broker: its config and its store/
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import random
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from controller.etcd_process import EtcdUnavailable, etcd_binary
from remoting.tls import ClientTls, make_local_ca

LOOPBACK = "127.0.0.1"
LAYOUT_FILE = "mqcluster.layout.json"
STATE_FILE = "mqcluster.state.json"
LOG_DIR = "logs"
PROMETHEUS_FILE = "prometheus.yml"
BROKER_CONF = "broker.conf"
STORE_DIR = "store"
NAMESRV = "namesrv"
BROKER = "broker"
CONSOLE = "console"  # `up --console`: the web console (console/, mqconsole)
CONSOLE_ANALYTICS = "analytics/lag"  # under the cluster directory: the console's lag tables
ETCD = "etcd"  # `up --controller`: the etcd member keeping the controller's state
MASTER_ROLES = ("ASYNC_MASTER", "SYNC_MASTER")
FLUSH_TYPES = ("ASYNC_FLUSH", "SYNC_FLUSH")
SLAVE_ROLE = "SLAVE"
DEFAULT_CLUSTER_NAME = "DefaultCluster"
# RocketMQ's name server port, the address every example uses: `up` takes it when it is free.
DEFAULT_NAMESRV_PORT = 9876
# The default of `up --namesrv-port` (0: no preference, as tests and tools starting clusters
# of their own want; they leave 9876 to the user's cluster).
NAMESRV_PORT_ENV = "MQCLUSTER_NAMESRV_PORT"
# Smaller commitlog files than RocketMQ's 1 GiB: each broker zero-fills its next file ahead
# of use, and a laptop running four brokers should not write 8 GiB for that.
LOCAL_BROKER_DEFAULTS = {"mappedFileSizeCommitLog": str(64 * 1024 * 1024)}
# `up --acl` (issue 22): the cluster key, the account file and the admin's credentials.
SECURITY_DIR = "security"
CLUSTER_KEY_FILE = "cluster.key"
ACL_FILE = "plain_acl.yml"
CREDENTIALS_FILE = "credentials.env"
LOCAL_ADMIN_ACCOUNT = "mqadmin"
TLS_DIR = "tls"
STOP_POLL_S = 0.05
KILL_WAIT_S = 5.0


class LocalClusterError(Exception):
    """The local cluster cannot be started or stopped as asked; one line for a person."""


# -- layout ------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Node:
    name: str  # namesrv-0, broker-a-0 (brokerName-brokerId)
    kind: str  # NAMESRV or BROKER
    port: int
    ha_port: int = 0
    broker_name: str = ""
    broker_id: int = 0
    metrics_port: int = 0  # Prometheus /metrics; 0: off (a layout from before metrics)
    v2_port: int = 0  # a broker's grpcProxyPort (RocketMQ 5 SDKs); 0: a layout from before
    send_port: int = 0  # a broker's sendListenPort; 0: any free one (a layout from before)
    remoting_port: int = 0  # a broker's remotingPort (4.x clients); 0: any free one

    @property
    def address(self) -> str:
        return f"{LOOPBACK}:{self.port}"

    @property
    def ports(self) -> list[int]:
        """Every port the node listens on (0s left out)."""
        return [p for p in (self.port, self.ha_port, self.metrics_port, self.v2_port,
                            self.send_port, self.remoting_port) if p]

    @property
    def metrics_address(self) -> str:
        return f"{LOOPBACK}:{self.metrics_port}" if self.metrics_port else ""


@dataclasses.dataclass(frozen=True)
class Layout:
    cluster_name: str
    groups: int
    slaves: int
    namesrvs: int
    flush: str
    role: str
    broker_props: dict[str, str]  # extra broker.conf keys for every broker
    nodes: list[Node]
    # `up --controller` (controller mode): the port of the controller namesrv-0 runs (its
    # state in the ETCD node's etcd); 0: RocketMQ 4.x master/slave.
    controller_port: int = 0

    @property
    def controller_addr(self) -> str:
        return f"{LOOPBACK}:{self.controller_port}" if self.controller_port else ""

    @property
    def etcd_endpoints(self) -> str:
        return ";".join(n.address for n in self.nodes if n.kind == ETCD)

    @property
    def shape(self) -> tuple[int, int, int]:
        return self.groups, self.slaves, self.namesrvs

    @property
    def namesrv_addr(self) -> str:
        return ";".join(n.address for n in self.nodes if n.kind == NAMESRV)

    @property
    def brokers(self) -> list[Node]:
        return [n for n in self.nodes if n.kind == BROKER]

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Layout:  # a layout before controller mode too
        return cls(**{**data, "nodes": [Node(**n) for n in data["nodes"]]})


def ports_needed(groups: int, slaves: int, namesrvs: int) -> int:
    return namesrvs + 2 * groups * (1 + slaves)  # a broker has a gRPC and an HA port


def group_name(index: int) -> str:
    """broker-a, broker-b, ..., broker-z, broker-aa, ..."""
    letters = ""
    index += 1
    while index:
        index, rest = divmod(index - 1, 26)
        letters = chr(ord("a") + rest) + letters
    return f"broker-{letters}"


def metrics_ports_needed(groups: int, slaves: int, namesrvs: int) -> int:
    return namesrvs + groups * (1 + slaves)  # one /metrics port per process


def v2_ports_needed(groups: int, slaves: int) -> int:
    return groups * (1 + slaves)  # one grpcProxyPort per broker


def plan_layout(*, groups: int, slaves: int, namesrvs: int, ports: Sequence[int], flush: str,
                role: str, broker_props: dict[str, str],
                cluster_name: str = DEFAULT_CLUSTER_NAME,
                metrics_ports: Sequence[int] = (), v2_ports: Sequence[int] = (),
                send_ports: Sequence[int] = (), remoting_ports: Sequence[int] = ()) -> Layout:
    """Name servers take the first ports, then each broker its gRPC port and its HA port.
    `metrics_ports` (none: metrics off) go to the processes in the same order, `v2_ports`
    (none: no v2 endpoint), `send_ports` and `remoting_ports` (none: any free port at each
    start) to the brokers."""
    if len(ports) != ports_needed(groups, slaves, namesrvs):
        raise ValueError("wrong number of ports for the shape")
    if metrics_ports and len(metrics_ports) != metrics_ports_needed(groups, slaves, namesrvs):
        raise ValueError("wrong number of metrics ports for the shape")
    if v2_ports and len(v2_ports) != v2_ports_needed(groups, slaves):
        raise ValueError("wrong number of v2 ports for the shape")
    for kind, given in (("send", send_ports), ("remoting", remoting_ports)):
        if given and len(given) != v2_ports_needed(groups, slaves):
            raise ValueError(f"wrong number of {kind} ports for the shape")
    free = iter(ports)
    v2 = iter(v2_ports or [0] * v2_ports_needed(groups, slaves))
    send = iter(send_ports or [0] * v2_ports_needed(groups, slaves))
    remoting = iter(remoting_ports or [0] * v2_ports_needed(groups, slaves))
    metrics = iter(metrics_ports or [0] * metrics_ports_needed(groups, slaves, namesrvs))
    nodes = [Node(f"{NAMESRV}-{i}", NAMESRV, next(free), metrics_port=next(metrics))
             for i in range(namesrvs)]
    for g in range(groups):
        name = group_name(g)
        for broker_id in range(slaves + 1):
            nodes.append(Node(f"{name}-{broker_id}", BROKER, next(free), next(free), name,
                              broker_id, next(metrics), next(v2), next(send),
                              next(remoting)))
    return Layout(cluster_name, groups, slaves, namesrvs, flush, role, dict(broker_props), nodes)


def with_controller(layout: Layout, ports: Sequence[int]) -> Layout:
    """The layout in controller mode: an etcd member (client and peer ports) and the
    controller's port (`ports`, three)."""
    client, peer, controller = ports
    return dataclasses.replace(layout, controller_port=controller, nodes=[
        *layout.nodes, Node(f"{ETCD}-0", ETCD, client, peer)])


def port_is_free(port: int, host: str = LOOPBACK) -> bool:
    """Nobody listens on the port (TIME_WAIT leftovers do not count)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


# Free ports are picked at random in [SERVER_PORT_LOW, the kernel's ephemeral range): a port
# bind(0) hands out is one the kernel may also give an outgoing connection, or another
# process's bind(0), before our server binds it (tests running side by side lost clusters
# that way); below that range a pick collides only with another random pick.
SERVER_PORT_LOW = 10_000
EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
PICK_TRIES_PER_PORT = 50


def _first_ephemeral_port() -> int:
    try:
        return int(EPHEMERAL_RANGE_FILE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def free_ports(count: int) -> list[int]:
    """`count` different ports nobody listens on now, outside the ephemeral range (the
    kernel's own picks where that range leaves too little room below it)."""
    sockets: list[socket.socket] = []
    high = _first_ephemeral_port()
    try:
        if high - SERVER_PORT_LOW >= 100 * count:
            for _ in range(PICK_TRIES_PER_PORT * count):
                if len(sockets) == count:
                    break
                port = random.randrange(SERVER_PORT_LOW, high)
                if any(s.getsockname()[1] == port for s in sockets):
                    continue  # SO_REUSEADDR would let it bind twice
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # TIME_WAIT is free
                try:
                    s.bind((LOOPBACK, port))
                except OSError:  # taken
                    s.close()
                    continue
                sockets.append(s)
        while len(sockets) < count:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sockets.append(s)
            s.bind((LOOPBACK, 0))
        return [s.getsockname()[1] for s in sockets]
    except OSError as e:  # e.g. EMFILE: one socket a port, all held at once
        raise LocalClusterError(f"cannot reserve {count} free ports on {LOOPBACK} (got "
                                f"{len(sockets) - 1}): {e.strerror or e}") from None
    finally:
        for s in sockets:
            s.close()


def pick_namesrv_port(requested: int | None, planned: int, reused: bool, others: set[int]
                      ) -> int:
    """The first name server's port. `requested`: None prefers DEFAULT_NAMESRV_PORT when it
    is free; 0 keeps `planned` (the last up's port when `reused`, else a free one); a port is
    that port (checked with the others later). A reused port taken since gives way to a free
    one. `others`: the layout's other ports."""
    if requested:
        return requested
    if (requested is None and DEFAULT_NAMESRV_PORT not in others
            and port_is_free(DEFAULT_NAMESRV_PORT)):
        return DEFAULT_NAMESRV_PORT
    while planned in others or (reused and not port_is_free(planned)):
        planned = free_ports(1)[0]
        reused = True  # a fresh port is checked like a kept one
    return planned


def check_ports_free(layout: Layout) -> None:
    for node in layout.nodes:
        for port in node.ports:
            if port and not port_is_free(port):
                raise LocalClusterError(f"port {port} of {node.name} is taken; choose another "
                                        "--base-port (or omit it to use free ports)")


def broker_conf(layout: Layout, node: Node, directory: Path) -> str:
    """broker.conf of one broker, with RocketMQ's key names."""
    master = next(n for n in layout.brokers
                  if n.broker_name == node.broker_name and n.broker_id == 0)
    props = {
        "brokerClusterName": layout.cluster_name,
        "brokerName": node.broker_name,
        "brokerId": str(node.broker_id),
        "namesrvAddr": layout.namesrv_addr,
        "bindAddress": LOOPBACK,
        "brokerIP1": LOOPBACK,
        "listenPort": str(node.port),
        "haListenPort": str(node.ha_port),
        # Its own planned port (listenPort + 3 may be another node's port in this layout);
        # 0 (off) in a layout from before.
        "grpcProxyPort": str(node.v2_port),
        # Its own planned port, kept across restarts (listenPort + 2 may be another node's
        # port in this layout); 0 (any free port) in a layout from before.
        "sendListenPort": str(node.send_port),
        # RocketMQ 4.x clients (remoting) learn it from the name servers' routes; planned
        # and kept like the others (listenPort + 4 may be another node's port); 0 (any free
        # port at each start) in a layout from before.
        "remotingPort": str(node.remoting_port),
        "brokerRole": layout.role if node.broker_id == 0 else SLAVE_ROLE,
        "flushDiskType": layout.flush,
        "storePathRootDir": str(directory / node.name / STORE_DIR),
        "autoCreateTopicEnable": "true",
        **LOCAL_BROKER_DEFAULTS,
    }
    if node.metrics_port:
        props["metricsPort"] = str(node.metrics_port)
    if layout.controller_port:  # the controller elects the master: ids are replica ids
        props.update(brokerId=str(node.broker_id + 1), brokerRole=layout.role,
                     enableControllerMode="true", controllerAddr=layout.controller_addr)
    elif node.broker_id != 0:
        props["haMasterAddress"] = f"{LOOPBACK}:{master.ha_port}"
    props.update(layout.broker_props)
    head = "# Written by `mqcluster up` (rewritten at every up; use --set KEY=VALUE to change)\n"
    return head + "".join(f"{k}={v}\n" for k, v in props.items())


def prometheus_config(layout: Layout) -> str:
    """A Prometheus config scraping every process of the layout that serves /metrics."""
    def job(name: str, nodes: list[Node]) -> str:
        targets = ", ".join(f"'{n.metrics_address}'" for n in nodes if n.metrics_port)
        return f"  - job_name: {name}\n    static_configs:\n      - targets: [{targets}]\n"
    return ("# Written by `mqcluster up`: prometheus --config.file=prometheus.yml\n"
            "global:\n  scrape_interval: 15s\nscrape_configs:\n"
            + job("rocketmq-namesrv", [n for n in layout.nodes if n.kind == NAMESRV])
            + job("rocketmq-broker", layout.brokers))


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise LocalClusterError(f"cannot read {path}: {e}") from None
    if not isinstance(data, dict):
        raise LocalClusterError(f"cannot read {path}: not a JSON object")
    return data


def write_json(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    os.replace(tmp, path)


# -- processes ---------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class ProcessRecord:
    """One started process, as the state file keeps it."""

    name: str
    pid: int
    start_time: int  # clock ticks since boot (/proc/PID/stat field 22): tells PID reuse apart
    argv: list[str]
    log: str  # path relative to the cluster directory


def _proc_stat(pid: int) -> tuple[str, int] | None:
    """(state letter, start time) of a process, None when there is none."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()  # the command name may hold blanks
    return fields[0], int(fields[19])


def _proc_cmdline(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return raw.decode("utf-8", errors="replace").split("\0")[:-1]


def is_ours(record: ProcessRecord) -> bool:
    """The PID is still the process we started (same start time, same command line)."""
    stat = _proc_stat(record.pid)
    if stat is None or stat[1] != record.start_time:
        return False
    # Empty for a moment while the new process is still inside exec (measured right after
    # Popen returned); the start time already tells it apart from any other process.
    return _proc_cmdline(record.pid) in (record.argv, [])


def is_alive(record: ProcessRecord) -> bool:
    _reap(record.pid)
    stat = _proc_stat(record.pid)
    return stat is not None and stat[0] not in "ZX" and is_ours(record)


def is_stopped(record: ProcessRecord) -> bool:
    """Alive but stopped by a signal (SIGSTOP / SIGTSTP): it holds its ports, answers nothing."""
    stat = _proc_stat(record.pid)
    return stat is not None and stat[0] in "Tt" and is_ours(record)


def _reap(pid: int) -> None:
    """Collects the exit status when the process is our child (mqcluster used in-process)."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def write_security(directory: Path) -> dict[str, str]:
    """`up --acl`: a random cluster key and an admin account (mode 0600 files under
    DIR/security, kept across ups); returns the broker.conf keys that turn ACL on. The
    cluster key reaches the processes as $MQ_CLUSTER_KEY, never on a command line."""
    sec = directory / SECURITY_DIR
    sec.mkdir(mode=0o700, exist_ok=True)

    def secret_file(name: str, text: str) -> None:
        path = sec / name
        if not path.exists():
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(text)

    secret = secrets.token_hex(16)
    secret_file(CLUSTER_KEY_FILE, secrets.token_hex(32) + "\n")
    secret_file(ACL_FILE, (
        "# Written by `mqcluster up --acl`; edited while running, it is reloaded.\n"
        "globalWhiteRemoteAddresses: []\n"
        "accounts:\n"
        f"  - accessKey: {LOCAL_ADMIN_ACCOUNT}\n"
        f"    secretKey: {secret}\n"
        "    admin: true\n"
        "    defaultTopicPerm: PUB|SUB\n"
        "    defaultGroupPerm: SUB\n"))
    secret_file(CREDENTIALS_FILE, f"MQ_ACCESS_KEY={LOCAL_ADMIN_ACCOUNT}\n"
                                  f"MQ_SECRET_KEY={secret}\n")
    return {"aclEnable": "true", "aclFile": str(sec / ACL_FILE)}


def write_tls(directory: Path) -> dict[str, str]:
    """`up --tls`: a local CA and a certificate for loopback (openssl; kept across ups);
    returns the broker.conf keys that turn TLS on."""
    ca, cert, key = make_local_ca(directory / SECURITY_DIR / TLS_DIR)
    return {"tlsEnable": "true", "tlsCertPath": str(cert), "tlsKeyPath": str(key),
            "tlsCaPath": str(ca)}


def client_tls(layout: Layout) -> ClientTls | None:
    """How mqcluster itself reaches the cluster's processes."""
    props = layout.broker_props
    if props.get("tlsEnable", "").lower() != "true":
        return None
    return ClientTls(props.get("tlsCaPath", ""))


def cluster_key_of(directory: Path) -> str:
    try:
        return (directory / SECURITY_DIR / CLUSTER_KEY_FILE).read_text().strip()
    except OSError:
        return ""


def child_env() -> dict[str, str]:
    """The environment of the cluster's processes: this interpreter finds the packages
    (nameserver, broker) where this one found them, installed or not."""
    spec = importlib.util.find_spec("nameserver")
    paths = [os.environ.get("PYTHONPATH", "")]
    if spec is not None and spec.origin is not None:
        paths.insert(0, str(Path(spec.origin).resolve().parents[1]))
    return dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in paths if p),
                PYTHONUNBUFFERED="1")


def process_argv(node: Node, directory: Path, layout: Layout | None = None) -> list[str]:
    if node.kind == ETCD:
        try:
            binary = etcd_binary()
        except EtcdUnavailable as e:
            raise LocalClusterError(str(e)) from None
        peer = f"http://{LOOPBACK}:{node.ha_port}"
        return [binary, "--name", node.name, "--data-dir", str(directory / node.name),
                "--listen-client-urls", f"http://{node.address}",
                "--advertise-client-urls", f"http://{node.address}",
                "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                "--initial-cluster", f"{node.name}={peer}", "--log-level", "warn"]
    if node.kind == NAMESRV:
        argv = [sys.executable, "-m", "nameserver", "--listen", node.address]
        if node.metrics_port:
            argv += ["--metrics-port", str(node.metrics_port)]
        if layout is not None and layout.controller_port and node.name == f"{NAMESRV}-0":
            argv += ["--enable-controller-in-namesrv", "--controller-listen",
                     layout.controller_addr, "--controller-etcd", layout.etcd_endpoints]
        if layout is not None and client_tls(layout) is not None:  # `up --tls`
            props = layout.broker_props
            argv += ["--tls-cert", props["tlsCertPath"], "--tls-key", props["tlsKeyPath"]]
        return argv
    if node.kind == CONSOLE:
        assert layout is not None
        # The lag tables where `make run`'s demo has the lag job write them.
        argv = [sys.executable, "-m", "console", "--namesrv", layout.namesrv_addr,
                "--listen", node.address, "--analytics", str(directory / CONSOLE_ANALYTICS)]
        if layout.broker_props.get("aclEnable", "").lower() == "true":  # `up --acl`
            argv.append("--login")
        tls = client_tls(layout)
        if tls is not None:
            argv += ["--tls-ca", tls.ca_path]
        return argv
    return [sys.executable, "-m", "broker", "-c", str(directory / node.name / BROKER_CONF)]


def spawn(node: Node, directory: Path, layout: Layout | None = None
          ) -> tuple[ProcessRecord, int]:
    """Starts a node detached (own session, no terminal); returns its record and the log
    size before it started (its boot line comes after)."""
    log_rel = f"{LOG_DIR}/{node.name}.log"
    log_path = directory / log_rel
    argv = process_argv(node, directory, layout)
    env = child_env()
    key = cluster_key_of(directory)  # `up --acl`: name servers and brokers share it
    if key:
        env["MQ_CLUSTER_KEY"] = key
    try:
        with log_path.open("ab") as log:
            offset = log.tell()
            process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log,
                                       stderr=subprocess.STDOUT, cwd=directory, env=env,
                                       start_new_session=True)
    except OSError as e:
        raise LocalClusterError(f"cannot start {node.name} (log {log_path}): "
                                f"{e.strerror or e}") from None
    stat = _proc_stat(process.pid)
    # Exited already: recorded with a start time no process has, so it reads as dead.
    record = ProcessRecord(node.name, process.pid, stat[1] if stat else -1, argv, log_rel)
    process.returncode = 0  # detached on purpose: no "still running" warning when dropped
    return record, offset


def stop_processes(records: Sequence[ProcessRecord], timeout: float) -> tuple[int, int]:
    """SIGTERM each record still alive and ours, wait up to `timeout`, SIGKILL the rest.
    Returns (stopped, killed)."""
    targets = [r for r in records if is_alive(r)]
    for r in targets:
        _signal(r, signal.SIGTERM)
    remaining = _wait_dead(targets, timeout)
    for r in remaining:
        if is_alive(r):
            _signal(r, signal.SIGKILL)
    still = _wait_dead(remaining, KILL_WAIT_S)
    if still:
        raise LocalClusterError("still running after SIGKILL: "
                                + ", ".join(f"{r.name} (pid {r.pid})" for r in still))
    return len(targets), len(remaining)


def _signal(record: ProcessRecord, signum: int) -> None:
    try:
        os.kill(record.pid, signum)
    except ProcessLookupError:
        pass  # it exited since it was checked


def _wait_dead(records: Sequence[ProcessRecord], timeout: float) -> list[ProcessRecord]:
    deadline = time.monotonic() + timeout
    alive = list(records)
    while alive:
        alive = [r for r in alive if is_alive(r)]
        if not alive or time.monotonic() > deadline:
            break
        time.sleep(STOP_POLL_S)
    return alive


def records_to_json(records: Sequence[ProcessRecord]) -> list[dict[str, Any]]:
    return [dataclasses.asdict(r) for r in records]


def records_from_json(data: list[dict[str, Any]]) -> list[ProcessRecord]:
    return [ProcessRecord(**r) for r in data]
