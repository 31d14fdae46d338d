"""Server processes of the peers: started on 127.0.0.1 in a given directory, stopped by PID."""

from __future__ import annotations

import importlib
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from mqclient.cli.local_cluster import free_ports

BOOT_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 30.0
POLL_S = 0.1

__all__ = ["ServerProcess", "free_ports", "missing_module", "missing_programs", "port_open",
           "program_version", "wait_until"]


def missing_programs(*names: str) -> str | None:
    """None when every program is on PATH, else which are not."""
    lacking = [n for n in names if shutil.which(n) is None]
    return f"not installed: {', '.join(lacking)}" if lacking else None


def missing_module(module: str, package: str) -> str | None:
    """None when the Python `module` imports, else that its `package` is not installed."""
    try:
        importlib.import_module(module)
    except ImportError:
        return f"Python package {package} not installed (pip install -e '.[bench]')"
    return None


def program_version(argv: Sequence[str]) -> str:
    """What `argv` (say `redis-server --version`) prints; "" when it cannot be run."""
    try:
        return subprocess.run(list(argv), capture_output=True, text=True,
                              timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def wait_until(ready: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(POLL_S)


class ServerProcess:
    """One server child: its output goes to `log`; `stop` (or leaving `with`) signals its
    PID (or the PID the server wrote to `pid_file`, for servers started through a wrapper
    script)."""

    def __init__(self, name: str, argv: Sequence[str], log: Path, *,
                 env: dict[str, str] | None = None, cwd: Path | None = None,
                 pid_file: Path | None = None) -> None:
        self.name = name
        self.log = log
        self.pid_file = pid_file
        with log.open("w") as out:
            self.process = subprocess.Popen(
                list(argv), stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                cwd=cwd, env=dict(os.environ, **(env or {})), start_new_session=True)

    def __enter__(self) -> ServerProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def check_alive(self) -> None:
        if self.process.poll() is not None:
            raise RuntimeError(f"{self.name} exited with {self.process.returncode}: "
                               f"{self.log_tail()}")

    def wait_port(self, port: int, timeout: float = BOOT_TIMEOUT_S) -> None:
        def ready() -> bool:
            self.check_alive()
            return port_open(port)
        wait_until(ready, timeout, f"{self.name} on port {port}")

    def log_tail(self, lines: int = 5) -> str:
        text = self.log.read_text(errors="replace").splitlines()
        return " | ".join(line.strip() for line in text[-lines:])

    def _server_pid(self) -> int | None:
        if self.pid_file is None:
            return None
        try:
            return int(self.pid_file.read_text().strip())
        except (OSError, ValueError):
            return None

    def stop(self) -> None:
        """SIGTERM to the server's PID, SIGKILL when it has not ended in time; a wrapper
        script ends with the server it started."""
        if self.process.poll() is not None:  # it died under the load: say so, once
            print(f"{self.name} had exited (code {self.process.returncode}) before it was "
                  f"stopped; its log ends: {self.log_tail()}", flush=True)
            return
        pid = self._server_pid() or self.process.pid
        _signal(pid, signal.SIGTERM)
        try:
            self.process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            _signal(pid, signal.SIGKILL)
            self.process.kill()
            self.process.wait()


def _signal(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass
