"""`python -m nameserver.healthcheck` against a real name server process (the compose
cluster's health check of its name servers)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.support.processes import REPO_ROOT, Processes, child_env


def healthcheck(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "nameserver.healthcheck", *args],
                          cwd=REPO_ROOT, env=child_env(), capture_output=True, text=True,
                          timeout=30)


def test_healthy_while_it_answers_and_not_once_stopped(tmp_path: Path) -> None:
    processes = Processes(tmp_path)
    try:
        namesrv = processes.namesrv()
        done = healthcheck("--addr", namesrv.address)
        assert (done.returncode, done.stdout.strip()) == (
            0, f"name server {namesrv.address} answers"), done.stderr
        assert namesrv.stop() == 0
        done = healthcheck("--addr", namesrv.address, "--timeout", "1")
        assert done.returncode == 1
        assert done.stdout.strip() == f"name server {namesrv.address}: UNAVAILABLE"
    finally:
        processes.stop_all()
