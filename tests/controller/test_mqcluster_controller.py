"""`mqcluster up --controller`: an etcd member, a controller in the first name server and
brokers in controller mode; a killed master is replaced, and `up` again restarts it as a
slave."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest

from controller import protocol as p
from controller.client import ControllerClient, ControllerUnavailable
from controller.etcd_process import EtcdUnavailable, etcd_binary
from mqclient.cli.local_cluster import LAYOUT_FILE
from tests.support.processes import LocalCluster
from tests.support.waiting import wait_until

pytestmark = pytest.mark.timeout(180)


def replica_info(addr: str) -> dict[str, Any]:
    async def call() -> dict[str, Any]:
        client = ControllerClient([addr], timeout_s=2)
        try:
            return await client.call(p.GET_REPLICA_INFO, {"brokerName": "broker-a"})
        except ControllerUnavailable:
            return {}
        finally:
            await client.close()
    return asyncio.run(call())


def test_up_with_controller_fails_over_and_restarts_the_dead(tmp_path: Path) -> None:
    try:
        etcd_binary()
    except EtcdUnavailable as e:
        pytest.skip(f"etcd is not installed: {e}")
    directory = tmp_path / "cluster"
    with LocalCluster(directory, "--controller", "--slaves", "2", "--role", "SYNC_MASTER",
                      "--no-metrics") as cluster:
        layout = json.loads((directory / LAYOUT_FILE).read_text())
        controller = f"127.0.0.1:{layout['controller_port']}"
        assert "getSyncStateSet -a " + controller in cluster.up_result.stdout
        wait_until(lambda: len(replica_info(controller).get("syncStateSet", [])) == 3,
                   timeout=30, message="every broker in the SyncStateSet")
        master = replica_info(controller)["masterAddress"]
        [pid] = [proc["pid"] for proc in cluster.processes if proc["address"] == master]
        os.kill(pid, signal.SIGKILL)
        wait_until(lambda: replica_info(controller).get("masterAddress") not in (None, master),
                   timeout=30, message="a new master")
        cluster.mqcluster("up")  # restarts the dead broker
        wait_until(lambda: len(replica_info(controller).get("syncStateSet", [])) == 3,
                   timeout=30, message="the old master back in the SyncStateSet")
        assert replica_info(controller)["masterAddress"] != master
        cluster.down("--clean")  # a trial found etcd's data left behind
        assert not directory.exists()
