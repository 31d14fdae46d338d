"""mqadmin's controller-mode commands against a real `python -m controller` on etcd, and
a controller run by the name server."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from controller import protocol as p
from controller.client import ControllerClient, ControllerUnavailable
from controller.etcd_process import EtcdCluster
from controller.startup import BOOT_SUCCESS_PREFIX
from mqclient.cli.local_cluster import free_ports
from mqclient.cli.mqadmin import main as mqadmin
from tests.support.processes import (
    REPO_ROOT,
    Processes,
    child_env,
    stop_process,
    wait_for_line,
)


@pytest.fixture
def controller(etcd: EtcdCluster, tmp_path: Path) -> Iterator[str]:
    log_path = tmp_path / "controller.log"
    with log_path.open("w") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "controller", "--etcd", etcd.endpoints_text, "--listen",
             "127.0.0.1:0", "--lease-ttl-s", "1"], cwd=REPO_ROOT, env=child_env(), text=True,
            stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL)
    try:
        line = wait_for_line(process, BOOT_SUCCESS_PREFIX, log_path)
        yield line.removeprefix(BOOT_SUCCESS_PREFIX)
    finally:
        stop_process(process, 10)


def register(addr: str, *ids: int) -> None:
    async def run() -> None:
        client = ControllerClient([addr], timeout_s=2)
        try:
            for _ in range(200):  # until it serves (a name server's starts after it) and leads
                try:
                    if (await client.call(p.GET_METADATA, {}))["leading"]:
                        break
                except ControllerUnavailable:
                    pass
                await asyncio.sleep(0.05)
            for i in ids:
                await client.call(p.REGISTER, {
                    "clusterName": "c", "brokerName": "broker-a", "brokerId": i,
                    "brokerAddress": f"127.0.0.1:{100 + i}", "haAddress": f"127.0.0.1:{200 + i}",
                    "epoch": 0, "maxOffset": 0, "epochEntries": []})
            await client.call(p.HEARTBEAT, {
                "clusterName": "c", "brokerName": "broker-a", "brokerId": ids[0],
                "epoch": 1, "maxOffset": 4096, "epochEntries": [[1, 0]]})
        finally:
            await client.close()
    asyncio.run(run())


def test_controller_commands(controller: str, capsys: pytest.CaptureFixture[str]) -> None:
    register(controller, 1, 2)
    assert mqadmin(["getControllerMetaData", "-a", controller, "--json"]) == 0
    meta = json.loads(capsys.readouterr().out)
    assert meta["leading"] and meta["leader"] == controller
    assert mqadmin(["getSyncStateSet", "-a", controller, "-b", "broker-a", "--json"]) == 0
    group = json.loads(capsys.readouterr().out)["broker-a"]
    assert group["masterId"] == 1 and group["syncStateSet"] == [1]
    assert mqadmin(["getSyncStateSet", "-a", controller]) == 0
    assert "broker-a" in capsys.readouterr().out
    assert mqadmin(["getBrokerEpoch", "-a", controller, "-b", "broker-a", "--json"]) == 0
    epochs = json.loads(capsys.readouterr().out)["epochs"]
    assert epochs == [{"epoch": 1, "startOffset": 0, "endOffset": 4096}]
    # 2 is not in the SyncStateSet: a designated election refuses it, clearly.
    assert mqadmin(["electMaster", "-a", controller, "-b", "broker-a", "-i", "2"]) == 1
    assert "ELECT_MASTER_FAILED" in capsys.readouterr().err
    assert mqadmin(["getSyncStateSet", "-a", controller, "-b", "nope"]) == 1
    assert "not registered" in capsys.readouterr().err


def test_controller_in_the_name_server(etcd: EtcdCluster, processes: Processes) -> None:
    """enableControllerInNamesrv: the name server process also runs a controller."""
    [port] = free_ports(1)
    addr = f"127.0.0.1:{port}"
    processes.namesrv("--enable-controller-in-namesrv", "--controller-listen", addr,
                      "--controller-etcd", etcd.endpoints_text)
    register(addr, 1)
    info = asyncio.run(_replica_info(addr))
    assert info["masterId"] == 1 and info["masterAddress"] == "127.0.0.1:101"


async def _replica_info(addr: str) -> dict[str, object]:
    client = ControllerClient([addr], timeout_s=2)
    try:
        return await client.call(p.GET_REPLICA_INFO, {"brokerName": "broker-a"})
    finally:
        await client.close()
