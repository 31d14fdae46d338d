"""Helpers shared by the tests that start real processes."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from mqclient.cli.local_cluster import STATE_FILE, records_from_json, stop_processes


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
