"""`python -m broker.healthcheck` (the compose cluster's broker health check) against real
name server and broker processes: healthy only once registered with every name server at
the address the broker advertises."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.support.brokers import broker_props, write_conf
from tests.support.processes import REPO_ROOT, Processes, child_env


def healthcheck(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "broker.healthcheck", *args],
                          cwd=REPO_ROOT, env=child_env(), capture_output=True, text=True,
                          timeout=30)


def test_healthy_once_registered_with_every_name_server(processes: Processes,
                                                        tmp_path: Path) -> None:
    known = processes.namesrv()
    unknown = processes.namesrv()  # the broker is not told about this one
    broker = processes.broker(write_conf(tmp_path / "b.conf", broker_props(
        tmp_path / "store", namesrvAddr=known.address)))
    me = ["--broker-name", "broker-a", "--broker-id", "0", "--addr", broker.address]

    done = healthcheck("-n", known.address, *me)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip() == (f"broker-a/0 at {broker.address} registered with "
                                   "1 name servers")

    done = healthcheck("-n", f"{known.address};{unknown.address}", *me)
    assert done.returncode == 1
    assert done.stdout.strip().endswith(f"{unknown.address}: broker-a/0 is not registered")
    assert known.address not in done.stdout.split("every name server:")[1]

    # Registered, but at another address than the one asked about (say brokerIP1 unset).
    done = healthcheck("-n", known.address, "--broker-name", "broker-a", "--broker-id", "0",
                       "--addr", "10.9.9.9:1")
    assert done.returncode == 1
    assert done.stdout.strip().endswith(f"broker-a/0 is {broker.address}")

    # From the environment, as in the containers; a stopped name server is a failure.
    assert known.stop() == 0
    done = subprocess.run([sys.executable, "-m", "broker.healthcheck", "--timeout", "1", *me],
                          cwd=REPO_ROOT, env={**child_env(), "NAMESRV_ADDR": known.address},
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 1
    assert done.stdout.strip().endswith(f"{known.address}: UNAVAILABLE")


def test_no_name_server_is_a_usage_error() -> None:
    env = {k: v for k, v in child_env().items() if k != "NAMESRV_ADDR"}
    done = subprocess.run([sys.executable, "-m", "broker.healthcheck", "--broker-name", "b",
                           "--broker-id", "0", "--addr", "127.0.0.1:1"], cwd=REPO_ROOT,
                          env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 2 and "no name server" in done.stderr
