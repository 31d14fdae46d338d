"""Real processes for tests: `python -m nameserver` / `python -m broker` on free loopback
ports (`Processes`), a local cluster by `mqcluster up` (`LocalCluster`), and stopping them by
their own handles (never by name)."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import select
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from common.constants import BROKER_BOOT_SUCCESS_PREFIX, NAMESRV_BOOT_SUCCESS_MESSAGE
from mqclient.cli.local_cluster import STATE_FILE, records_from_json, stop_processes

REPO_ROOT = Path(__file__).resolve().parents[2]
BOOT_TIMEOUT_S = 20.0
STOP_TIMEOUT_S = 15.0


def stop_process(process: subprocess.Popen[Any], timeout: float) -> None:
    """SIGTERM, then SIGKILL if it has not exited within `timeout`; closes its stdout."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    if process.stdout is not None:
        process.stdout.close()


def send_garbage(address: str, payload: bytes) -> None:
    """Writes bytes that are no protocol at all to HOST:PORT and reads until it hangs up."""
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as s:
        s.sendall(payload)
        s.settimeout(2)
        try:
            while s.recv(4096):
                pass
        except (TimeoutError, ConnectionResetError):
            pass


MQCLUSTER_TIMEOUT_S = 120.0


class LocalCluster:
    """A cluster of real processes started with `mqcluster up --dir DIR ARGS`; `down()` (or
    leaving the `with` block) stops it, and if that fails stops the PIDs its state file lists
    (each checked to still be the process mqcluster started)."""

    def __init__(self, directory: Path, *up_args: str, env: dict[str, str] | None = None
                 ) -> None:
        self.directory = directory
        self.env = env
        self.up_result = self.mqcluster("up", *up_args)
        try:
            self.processes = json.loads(self.mqcluster("status", "--json").stdout)
        except BaseException:
            self.down()
            raise
        self.namesrv_addr = ";".join(p["address"] for p in self.processes
                                     if p["kind"] == "namesrv")

    def mqcluster(self, command: str, *args: str, check: bool = True
                  ) -> subprocess.CompletedProcess[str]:
        return run_mqcluster(self.directory, command, *args, check=check, env=self.env)

    def addresses(self, kind: str = "broker") -> list[str]:
        return [p["address"] for p in self.processes if p["kind"] == kind]

    def down(self, *args: str) -> subprocess.CompletedProcess[str] | None:
        return stop_local_cluster(self.directory, *args)

    def __enter__(self) -> LocalCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.down()


def run_mqcluster(directory: Path, command: str, *args: str, check: bool = True,
                  env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [sys.executable, "-m", "mqclient.cli.mqcluster", command, "--dir", str(directory), *args],
        capture_output=True, text=True, timeout=MQCLUSTER_TIMEOUT_S, stdin=subprocess.DEVNULL,
        env=env)
    if check and result.returncode != 0:
        raise AssertionError(f"mqcluster {command} exited {result.returncode}:\n"
                             f"{result.stdout}{result.stderr}")
    return result


def stop_local_cluster(directory: Path, *args: str) -> subprocess.CompletedProcess[str] | None:
    """`mqcluster down`; if that fails, stops the PIDs the state file lists (each checked to
    still be the process mqcluster started)."""
    try:
        return run_mqcluster(directory, "down", *args)
    finally:
        state = directory / STATE_FILE
        if state.exists():
            data = json.loads(state.read_text())
            stop_processes(records_from_json(data["processes"]), timeout=10.0)


def child_env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(REPO_ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]))


def wait_for_line(process: subprocess.Popen[str], prefix: str, log_path: Path) -> str:
    assert process.stdout is not None
    deadline = time.monotonic() + BOOT_TIMEOUT_S
    while (remaining := deadline - time.monotonic()) > 0:
        readable, _, _ = select.select([process.stdout], [], [], remaining)
        if not readable:
            break
        line = process.stdout.readline()
        if not line:
            break
        if line.startswith(prefix):
            return line.strip()
    raise AssertionError(f"process did not boot (exit code {process.poll()}):\n"
                         f"{log_path.read_text()}")


_BROKER_BOOT = re.compile(r"The broker\[(?P<name>[^,]+), (?P<addr>[^\]]+)\] boot success")


@dataclasses.dataclass
class Process:
    process: subprocess.Popen[str]
    address: str
    log_path: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    def stop(self, signum: int = signal.SIGTERM, timeout: float = STOP_TIMEOUT_S) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signum)
        return self.process.wait(timeout=timeout)

    def log_text(self) -> str:
        return self.log_path.read_text()


class Processes:
    """Starts name servers and brokers; `stop_all` stops each by its own handle."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.started: list[subprocess.Popen[str]] = []

    def _spawn(self, args: list[str], log_name: str) -> tuple[subprocess.Popen[str], Path]:
        log_path = self.tmp_path / f"{log_name}-{len(self.started)}.log"
        with log_path.open("w") as log_file:
            process = subprocess.Popen(
                [sys.executable, *args], cwd=REPO_ROOT, env=child_env(), text=True,
                stdout=subprocess.PIPE, stderr=log_file, stdin=subprocess.DEVNULL)
        self.started.append(process)
        return process, log_path

    def namesrv(self, *args: str) -> Process:
        process, log_path = self._spawn(["-m", "nameserver", "--listen", "127.0.0.1:0",
                                         *args], "namesrv")
        line = wait_for_line(process, NAMESRV_BOOT_SUCCESS_MESSAGE, log_path)
        return Process(process, line.rpartition("listen=")[2], log_path)

    def broker(self, conf: Path) -> Process:
        process, log_path = self._spawn(["-m", "broker", "-c", str(conf)], "broker")
        line = wait_for_line(process, BROKER_BOOT_SUCCESS_PREFIX, log_path)
        match = _BROKER_BOOT.match(line)
        assert match is not None, line
        return Process(process, match["addr"], log_path)

    def stop_all(self) -> None:
        for process in self.started:
            stop_process(process, STOP_TIMEOUT_S)
