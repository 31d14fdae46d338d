"""Starting etcd members on this machine (tests, `mqcluster up --controller`): 1 or 3
members on loopback ports, each in a directory of its own, stopped by their own handles.

The binary is $ETCD_BIN, else `etcd` on PATH (Debian's etcd-server installs /usr/bin/etcd;
scripts/ensure-etcd.sh installs it).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

LOOPBACK = "127.0.0.1"
START_TIMEOUT_S = 20.0


class EtcdUnavailable(RuntimeError):
    """No etcd binary on this machine."""


def etcd_binary() -> str:
    explicit = os.environ.get("ETCD_BIN")
    if explicit:
        if os.access(explicit, os.X_OK):
            return explicit
        raise EtcdUnavailable(f"ETCD_BIN={explicit} is not an executable")
    found = shutil.which("etcd") or ("/usr/bin/etcd" if os.access("/usr/bin/etcd", os.X_OK)
                                     else None)
    if found is None:
        raise EtcdUnavailable("no etcd binary (install Debian's etcd-server: "
                              "scripts/ensure-etcd.sh, or set ETCD_BIN)")
    return found


def _free_ports(count: int) -> list[int]:
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sockets.append(s)
            s.bind((LOOPBACK, 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


class EtcdMember:
    def __init__(self, name: str, data_dir: Path, client_port: int, peer_port: int) -> None:
        self.name = name
        self.data_dir = data_dir
        self.client_port = client_port
        self.peer_port = peer_port
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path = data_dir.with_suffix(".log")

    @property
    def endpoint(self) -> str:
        return f"{LOOPBACK}:{self.client_port}"

    @property
    def peer_url(self) -> str:
        return f"http://{LOOPBACK}:{self.peer_port}"

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://{self.endpoint}/health", timeout=1) as r:
                return json.loads(r.read()).get("health") == "true"
        except (OSError, ValueError, urllib.error.URLError):
            return False

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None


class EtcdCluster:
    """`members` etcd processes forming one cluster under `directory`. `start()` waits until
    every member answers healthy; `stop()` (or leaving the `with` block) stops them."""

    def __init__(self, directory: Path, members: int = 1, *, binary: str | None = None,
                 heartbeat_ms: int = 50, election_ms: int = 500,
                 ports: list[int] | None = None) -> None:
        """`ports`: a client and a peer port per member (default: ports the kernel hands
        out now; callers that can should pass ports outside the ephemeral range, which an
        outgoing connection cannot take before etcd binds them)."""
        self.directory = Path(directory)
        self.binary = binary or etcd_binary()
        self.heartbeat_ms = heartbeat_ms
        self.election_ms = election_ms
        if ports is not None and len(ports) != 2 * members:
            raise ValueError(f"{members} etcd members need {2 * members} ports")
        ports = ports or _free_ports(2 * members)
        self.members = [EtcdMember(f"etcd{i}", self.directory / f"etcd{i}", ports[2 * i],
                                   ports[2 * i + 1]) for i in range(members)]
        self.initial_cluster = ",".join(f"{m.name}={m.peer_url}" for m in self.members)

    @property
    def endpoints(self) -> list[str]:
        return [m.endpoint for m in self.members]

    @property
    def endpoints_text(self) -> str:
        return ";".join(self.endpoints)

    def _spawn(self, m: EtcdMember, new: bool) -> None:
        m.data_dir.parent.mkdir(parents=True, exist_ok=True)
        args = [self.binary, "--name", m.name, "--data-dir", str(m.data_dir),
                "--listen-client-urls", f"http://{m.endpoint}",
                "--advertise-client-urls", f"http://{m.endpoint}",
                "--listen-peer-urls", m.peer_url, "--initial-advertise-peer-urls", m.peer_url,
                "--initial-cluster", self.initial_cluster,
                "--initial-cluster-state", "new" if new else "existing",
                "--initial-cluster-token", f"mq-{os.getpid()}-{self.members[0].client_port}",
                "--heartbeat-interval", str(self.heartbeat_ms),
                "--election-timeout", str(self.election_ms),
                "--log-level", "warn"]
        with m.log_path.open("ab") as log:
            m.process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL)

    def start(self) -> EtcdCluster:
        for m in self.members:
            self._spawn(m, new=not m.data_dir.exists())
        self.wait_healthy(self.members)
        return self

    def wait_healthy(self, members: list[EtcdMember], timeout: float = START_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout
        for m in members:
            while not m.healthy():
                if not m.running:
                    raise RuntimeError(f"etcd {m.name} exited: {m.log_path.read_text()[-2000:]}")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"etcd {m.name} not healthy within {timeout} s: "
                                       f"{m.log_path.read_text()[-2000:]}")
                time.sleep(0.05)

    def kill(self, index: int, signum: int = signal.SIGKILL) -> None:
        m = self.members[index]
        if m.process is not None and m.process.poll() is None:
            m.process.send_signal(signum)
            m.process.wait(timeout=10)

    def restart(self, index: int, wait: bool = True) -> None:
        m = self.members[index]
        self.kill(index)
        self._spawn(m, new=False)
        if wait and len(self.members) == 1:
            self.wait_healthy([m])

    def stop(self) -> None:
        for m in self.members:
            p = m.process
            if p is None or p.poll() is not None:
                continue
            p.terminate()
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def __enter__(self) -> EtcdCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
