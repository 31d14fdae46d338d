"""Helpers shared by the tests that start real processes."""

from __future__ import annotations

import socket
import subprocess


def stop_process(process: subprocess.Popen[bytes], timeout: float) -> None:
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
