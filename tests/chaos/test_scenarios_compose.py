"""Issue 15's scenarios 1-6 against the compose cluster of compose/ in Docker: mqchaos
(`--target compose`) runs the workload from the host through the published ports while its
nemesis breaks containers through the Docker API (kill, pause, network disconnect, start),
heals, drains, reads back what was never consumed and checks the history.

Clusters (compose projects of their own names, on free ports, removed by the tests):
- a SYNC_MASTER + SYNC_FLUSH one for scenarios 1, 5, 4 and 2, in that order (each leaves it
  whole: a killed node is restarted, a paused one unpaused, and the next run waits for the
  slaves to be in sync);
- one for scenario 3, which waits for the name servers' 120 s expiry (default timers): it
  runs in a thread from the start of this module, alongside the others, and its test (the
  last) collects the result, so the expiry costs no wall time of its own;
- an ASYNC_MASTER + ASYNC_FLUSH one (docker-compose.async.yml) for scenario 6.

The image is built once per session (tests/compose's fixtures). Each test prints its summary
(pytest -s); short send phases (12-20 s) keep the whole module at about 4-5 minutes.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import pytest

from chaos import report
from chaos.cli import main
from chaos.constants import CHART_FILE, HISTORY_FILE, RESULT_FILE
from chaos.history import read_history
from chaos.operations import consumes, fault_windows, sends
from chaos.runner import RunOptions, run
from chaos.scenarios import SCENARIOS
from mqclient.admin import AdminError, MQAdmin
from tests.compose.cluster import ASYNC_FILE, BASE_FILE, ComposeCluster, timed
from tests.compose.conftest import compose_image, compose_tool, docker_client  # noqa: F401
from tests.compose.roundtrip import wait_for_slaves_in_sync

pytestmark = [pytest.mark.docker, pytest.mark.slow,  # chaos runs on compose
              pytest.mark.timeout(1200)]  # the first test may build the images from nothing
SCENARIO_3_TIMEOUT_S = 420.0
WHOLE_TIMEOUT_S = 90.0


def up(cluster: ComposeCluster) -> ComposeCluster:
    with timed(f"chaos: compose up {cluster.project} until healthy and in sync"):
        cluster.compose("up", "-d")
        cluster.wait_healthy()
        wait_for_slaves_in_sync(cluster.namesrv_addr)
    return cluster


def down(cluster: ComposeCluster) -> None:
    cluster.down()
    assert cluster.leftovers() == []


def wait_whole(cluster: ComposeCluster, timeout: float = WHOLE_TIMEOUT_S) -> None:
    """Every name server lists all four brokers (a restarted name server learns them at
    their next registration, within 30 s) and every master has its slave in sync."""
    deadline = time.monotonic() + timeout
    for addr in cluster.namesrv_addr.split(";"):
        with MQAdmin(addr) as admin:
            while True:
                with contextlib.suppress(AdminError):
                    if sum(len(g.addrs) for g in admin.cluster_info().all_groups()) == 4:
                        break
                assert time.monotonic() < deadline, f"{addr} does not list all brokers"
                time.sleep(0.5)
    wait_for_slaves_in_sync(cluster.namesrv_addr, timeout=max(1.0, deadline - time.monotonic()))


def run_scenario(cluster: ComposeCluster, name: str, duration_s: float, out: Path
                 ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    with timed(f"chaos: scenario {name} on compose ({duration_s:g} s send phase)"):
        result = run(RunOptions(SCENARIOS[name], out_dir=out, target="compose",
                                duration_s=duration_s, namesrv_addr=cluster.namesrv_addr,
                                compose_project=cluster.project))
    print("\n" + report.summary(result))
    assert (out / RESULT_FILE).exists() and (out / CHART_FILE).stat().st_size > 10_000
    assert result["run"]["target"] == "compose"
    return result, read_history(out / HISTORY_FILE)


class Background:
    """Scenario 3 on a cluster of its own, in a thread: up, run, down."""

    def __init__(self, cluster: ComposeCluster, out: Path) -> None:
        self.cluster = cluster
        self.out = out
        self.result: tuple[dict[str, Any], list[dict[str, Any]]] | None = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="scenario-3", daemon=True)

    def _run(self) -> None:
        try:
            up(self.cluster)
            self.result = run_scenario(self.cluster, "cut-master-registration", 12.0,
                                       self.out)
        except BaseException as e:  # noqa: BLE001 - handed to the test
            self.error = e
        finally:  # removed while the other scenarios still run
            try:
                down(self.cluster)
            except BaseException as e:  # noqa: BLE001 - handed to the test
                self.error = self.error or e


@pytest.fixture(scope="module")
def scenario_3(docker_client: docker.DockerClient, compose_tool: list[str],  # noqa: F811
               compose_image: str, tmp_path_factory: pytest.TempPathFactory  # noqa: F811
               ) -> Iterator[Background]:
    bg = Background(ComposeCluster(compose_tool, compose_image, docker_client),
                    tmp_path_factory.mktemp("scenario-3") / "run")
    bg.thread.start()
    try:
        yield bg
    finally:
        bg.thread.join(SCENARIO_3_TIMEOUT_S)
        if bg.thread.is_alive() or bg.cluster.leftovers():
            down(bg.cluster)


@pytest.fixture(scope="module")
def sync_cluster(docker_client: docker.DockerClient, compose_tool: list[str],  # noqa: F811
                 compose_image: str, scenario_3: Background  # noqa: F811
                 ) -> Iterator[ComposeCluster]:
    """Requests scenario_3 first, so that it runs from the start of the module."""
    cluster = ComposeCluster(compose_tool, compose_image, docker_client, files=[BASE_FILE])
    try:
        yield up(cluster)
    finally:
        down(cluster)


@pytest.fixture(scope="module")
def async_cluster(docker_client: docker.DockerClient, compose_tool: list[str],  # noqa: F811
                  compose_image: str) -> Iterator[ComposeCluster]:  # noqa: F811
    cluster = ComposeCluster(compose_tool, compose_image, docker_client,
                             files=[BASE_FILE, ASYNC_FILE])
    try:
        yield up(cluster)
    finally:
        down(cluster)


def test_scenario_1_kill_sync_master_loses_nothing_and_fails_over(
        sync_cluster: ComposeCluster, tmp_path: Path) -> None:
    result, history = run_scenario(sync_cluster, "kill-master-sync", 15.0, tmp_path / "run")
    assert result["scenario"]["passed"], result["scenario"]["problems"]
    q = result["queue"]
    assert q["acknowledged"] >= 500 and q["lost_count"] == 0 and q["unexpected_count"] == 0
    assert result["order"]["valid"], result["order"]["violations"]
    [window] = fault_windows(history)
    assert (window.fault, window.node) == ("kill", "broker-a-0") and window.end is not None

    # Producers move to broker-b within seconds: plain sends begun 5 s after the kill all
    # went there, and none failed.
    later = [op for op in sends(history) if not op.value.get("ordered")
             and window.start + 5 < op.invoke_time < window.end]
    assert len(later) > 50
    assert all(op.ok and op.value["broker"] == "broker-b" for op in later)

    # Consumers go on from the slave: broker-a messages acknowledged before the kill were
    # first consumed while the master was down.
    acked_before = {op.id for op in sends(history) if op.acknowledged
                    and op.value["broker"] == "broker-a"
                    and op.complete_time is not None and op.complete_time < window.start}
    first: dict[str, float] = {}
    for op in consumes(history):
        first.setdefault(op.id, op.invoke_time)
    assert any(window.start < first[i] < window.end for i in acked_before), \
        "no broker-a message consumed while its master was down"

    [w] = result["recovery"]["windows"]
    assert w["send"]["plain"]["next_ok_s"] is not None and w["send"]["plain"]["next_ok_s"] < 5
    assert w["consume"]["next_consume_by_group_s"].get("broker-a") is not None


def test_scenario_5_restarted_master_loses_nothing_and_no_offset_stays_behind(
        sync_cluster: ComposeCluster, tmp_path: Path) -> None:
    """After scenario 1 (its master killed, restarted at the end): kill -9 it again, start
    it while the producers still send."""
    wait_whole(sync_cluster)
    result, history = run_scenario(sync_cluster, "kill-restart-master", 15.0,
                                   tmp_path / "run")
    assert result["scenario"]["passed"], result["scenario"]["problems"]
    q = result["queue"]
    assert q["lost_count"] == 0 and q["undelivered_count"] == 0
    [window] = fault_windows(history)
    assert window.end is not None
    # broker-a takes writes again after its restart.
    assert any(op.acknowledged and op.value["broker"] == "broker-a"
               and op.invoke_time > window.end for op in sends(history))
    offsets = result["consumer_offsets"]
    # The restarted master may serve offsets it persisted before the kill (up to 5 s old)
    # until the consumers' next commit: reported, and none stays behind.
    assert offsets["samples"] > 0 and offsets["unrepaired_count"] == 0
    [r] = offsets["redeliveries"]
    # Duplicates are reported and bounded. Usually they lie beyond what was committed at the
    # kill; in about one run of five here a consumer given broker-a's queues while the
    # restarted master answered with no offset of the group started them from offset 0
    # (reported as redelivered below the committed offsets).
    assert r["broker_extra_deliveries"] <= r["broker_consumed"]
    if r["redelivered_below_committed_count"] == 0:
        assert r["redelivered"] <= r["uncommitted_at_fault"]


def test_scenario_4_paused_slave_weak_acks_then_catch_up(
        sync_cluster: ComposeCluster, tmp_path: Path) -> None:
    wait_whole(sync_cluster)
    result, _ = run_scenario(sync_cluster, "pause-slave", 20.0, tmp_path / "run")
    assert result["scenario"]["passed"], result["scenario"]["problems"]
    q = result["queue"]
    assert q["acknowledged_weak"] > 0 and q["lost_weak_count"] == 0
    assert set(q["weak_statuses"]) <= {"FLUSH_SLAVE_TIMEOUT", "SLAVE_NOT_AVAILABLE"}
    [caught_up] = result["awaits"]["awaits"]
    assert caught_up["met"] and caught_up["since_fault_end_s"] is not None


def test_scenario_2_kill_a_name_server_clients_go_on(
        sync_cluster: ComposeCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
        ) -> None:
    """Through the command line, as a user runs it: the name servers' addresses are read
    from their containers' published ports."""
    wait_whole(sync_cluster)
    out = tmp_path / "run"
    with timed("chaos: scenario kill-namesrv on compose (mqchaos run, 12 s send phase)"):
        code = main(["run", "--target", "compose", "--compose-project", sync_cluster.project,
                     "--scenario", "kill-namesrv", "--duration", "12", "--out", str(out),
                     "--quiet"])
    printed = capsys.readouterr().out
    print(printed)
    assert code == 0, printed
    assert "mqchaos: kill-namesrv on compose - PASSED" in printed
    result = json.loads((out / RESULT_FILE).read_text())
    history = read_history(out / HISTORY_FILE)
    assert result["run"]["namesrv_addr"] == sync_cluster.namesrv_addr
    assert result["scenario"]["passed"], result["scenario"]["problems"]
    [window] = fault_windows(history)
    assert (window.fault, window.node) == ("kill", "namesrv-0")
    # Clients go on through the other name server: sends and consumes after the kill.
    assert any(op.ok and op.invoke_time > window.start + 1 for op in sends(history))
    assert any(op.invoke_time > window.start + 1 for op in consumes(history))
    assert result["queue"]["lost_count"] == 0


def test_a_project_of_the_wrong_role_is_refused(
        sync_cluster: ComposeCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
        ) -> None:
    code = main(["run", "--target", "compose", "--compose-project", sync_cluster.project,
                 "--scenario", "kill-master-async", "--out", str(tmp_path / "run"), "--quiet"])
    assert code == 3
    assert ("broker-a-0 of compose project " f"{sync_cluster.project} runs SYNC_MASTER + "
            "SYNC_FLUSH; scenario kill-master-async needs ASYNC_MASTER + ASYNC_FLUSH "
            "(compose/compose.sh --async)") in capsys.readouterr().err


def test_scenario_6_kill_async_master_loss_within_reported_fall_behind(
        async_cluster: ComposeCluster, tmp_path: Path) -> None:
    result, _ = run_scenario(async_cluster, "kill-master-async", 12.0, tmp_path / "run")
    assert result["scenario"]["passed"], result["scenario"]["problems"]
    assert result["queue"]["acknowledged"] >= 1000
    [probe] = result["fall_behind"]["probes"]
    assert probe["lost_below_slave_ack_count"] == 0
    assert probe["lost_messages"] <= probe["behind_messages"] + probe["written_after_probe"]
    assert result["queue"]["lost_count"] == probe["lost_messages"]


def test_scenario_3_master_cut_off_the_name_servers_expires_and_comes_back(
        scenario_3: Background) -> None:
    """Ran in the background since the module began (see the module's docstring)."""
    scenario_3.thread.join(SCENARIO_3_TIMEOUT_S)
    assert not scenario_3.thread.is_alive(), "scenario 3 still running"
    if scenario_3.error is not None:
        raise scenario_3.error
    assert scenario_3.result is not None
    result, history = scenario_3.result
    assert result["scenario"]["passed"], result["scenario"]["problems"]
    [window] = fault_windows(history)
    assert (window.fault, window.node) == ("disconnect", "broker-a-0")
    applied = [e for e in history if e["f"] == "fault" and e["value"]["phase"] == "applied"]
    # Only the registration network was cut.
    assert applied[0]["value"]["detail"]["networks"] == [
        f"{scenario_3.cluster.project}_registration"]
    gone, back = result["awaits"]["awaits"]
    assert gone["condition"] == "unlisted" and gone["met"]
    assert 80 <= gone["since_fault_start_s"] <= 150  # the 120 s expiry
    assert back["condition"] == "listed" and back["met"] and back["since_fault_end_s"] <= 45
    # While cut off the name servers, the master still served clients: broker-a took sends
    # in the window, and its messages were consumed.
    assert any(op.acknowledged and op.value["broker"] == "broker-a"
               and window.start + 5 < op.invoke_time < gone["time"] for op in sends(history))
    assert result["queue"]["lost_count"] == 0
