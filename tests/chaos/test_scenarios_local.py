"""Issue 15's scenarios 1 and 6 (and 6b) against a local `mqcluster` of real processes:
mqchaos runs the workload while its nemesis kills processes by PID (and restarts them as
mqcluster does), heals, drains, reads back what was never consumed and checks the history.
Each test prints its summary (pytest -s)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from chaos import report
from chaos.cli import main
from chaos.constants import CHART_FILE, HISTORY_FILE, RESULT_FILE
from chaos.history import read_history
from chaos.operations import consumes, fault_windows, run_info, sends
from chaos.runner import RunOptions, run
from chaos.scenarios import SCENARIOS
from tests.chaos.leftovers import chaos_names, cleanup_note
from tests.support.processes import LocalCluster
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]  # chaos runs
SCENARIO_NAMES = ("kill-master-sync", "kill-master-async", "kill-master-async-lagging")


@pytest.fixture(scope="module")
def clusters(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    """One cluster per scenario, all started first: a fresh cluster's slaves learn their
    master's address at their second registration with the name server (30 s later; they
    copy topic configs only then), so the clusters of the later tests are ready when their
    turn comes. mqchaos uses a running cluster and leaves it running; stopped here."""
    started: list[LocalCluster] = []
    try:
        for name in SCENARIO_NAMES:
            directory = tmp_path_factory.mktemp(name)
            started.append(LocalCluster(directory, *SCENARIOS[name].shape.mqcluster_args()))
        yield {name: c.directory for name, c in zip(SCENARIO_NAMES, started, strict=True)}
    finally:
        for c in started:
            c.down()


def run_scenario(tmp_path: Path, clusters: dict[str, Path], name: str, duration_s: float,
                 keep_topics: bool = False) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    out = tmp_path / "run"
    result = run(RunOptions(SCENARIOS[name], out_dir=out, duration_s=duration_s,
                            cluster_dir=clusters[name], keep_topics=keep_topics))
    print("\n" + report.summary(result))
    assert (out / RESULT_FILE).exists() and (out / CHART_FILE).stat().st_size > 10_000
    return result, read_history(out / HISTORY_FILE)


def test_scenario_1_kill_sync_master_loses_nothing_and_fails_over(
        tmp_path: Path, clusters: dict[str, Path]) -> None:
    result, history = run_scenario(tmp_path, clusters, "kill-master-sync", 20.0)
    assert result["scenario"]["passed"], result["scenario"]["problems"]
    q = result["queue"]
    assert q["acknowledged"] >= 1000 and q["lost_count"] == 0 and q["unexpected_count"] == 0
    assert result["order"]["valid"], result["order"]["violations"]
    [window] = fault_windows(history)
    assert (window.fault, window.node) == ("kill", "broker-a-0") and window.end is not None

    # Producers move to broker-b within seconds: plain sends begun 5 s after the kill all
    # went there, and none failed.
    later = [op for op in sends(history) if not op.value.get("ordered")
             and window.start + 5 < op.invoke_time < window.end]
    assert len(later) > 100
    assert all(op.ok and op.value["broker"] == "broker-b" for op in later)

    # Consumers go on from the slave: broker-a messages acknowledged before the kill were
    # first consumed while the master was down.
    acked_before = {op.id for op in sends(history) if op.acknowledged
                    and op.value["broker"] == "broker-a" and not op.value.get("ordered")
                    and op.complete_time is not None and op.complete_time < window.start}
    first: dict[str, float] = {}
    for op in consumes(history):
        first.setdefault(op.id, op.invoke_time)
    from_slave = [i for i in acked_before if window.start < first[i] < window.end]
    assert from_slave, "no broker-a message consumed while its master was down"

    # Recovery times are reported.
    [w] = result["recovery"]["windows"]
    assert w["send"]["plain"]["next_ok_s"] is not None and w["send"]["plain"]["next_ok_s"] < 5
    assert w["consume"]["next_consume_by_group_s"].get("broker-a") is not None
    assert w["send"]["ordered"]["keys_failed"] > 0  # their queues are on the dead master

    # The run's topics, retry topics and groups are gone from the (healed) cluster: a later
    # lag report does not show them.
    note = cleanup_note(history)
    assert note is not None and note["problems"] == [], note
    assert {"ChaosPlain", "ChaosOrdered", "%RETRY%chaos-plain", "%RETRY%chaos-ordered"} <= {
        t.rpartition("-")[0] for t in note["deleted"]}
    namesrv = run_info(history)["namesrv_addr"]
    wait_until(lambda: chaos_names(namesrv) == (set(), set()), timeout=30,
               message="no chaos topic routed and no chaos group in a lag report")


def test_scenario_6_kill_async_master_loss_within_reported_fall_behind(
        tmp_path: Path, clusters: dict[str, Path]) -> None:
    result, history = run_scenario(tmp_path, clusters, "kill-master-async", 16.0)
    # broker-a's master stays dead: the run's topics are deleted from broker-b, and the run
    # says they are left on broker-a.
    note = cleanup_note(history)
    assert note is not None and any(p.startswith("broker-a") for p in note["problems"]), note
    assert any(t.startswith("ChaosPlain-") for t in note["deleted"])
    assert result["scenario"]["passed"], result["scenario"]["problems"]
    assert result["queue"]["acknowledged"] >= 2000
    [probe] = result["fall_behind"]["probes"]
    assert probe["lost_below_slave_ack_count"] == 0
    assert probe["lost_messages"] <= probe["behind_messages"] + probe["written_after_probe"]


def test_scenario_6b_lagging_slave_loss_is_measured_beyond_its_ack(
        tmp_path: Path, clusters: dict[str, Path]) -> None:
    """The frozen slave is killed with its master: what it had not acknowledged is gone,
    and the checker finds exactly that part lost."""
    result, history = run_scenario(tmp_path, clusters, "kill-master-async-lagging", 14.0,
                                   keep_topics=True)
    assert result["scenario"]["passed"], result["scenario"]["problems"]
    assert cleanup_note(history) is None  # keep_topics (--keep-topics): left as they are
    namesrv = run_info(history)["namesrv_addr"]
    topics, groups = chaos_names(namesrv)
    assert any(t.startswith("ChaosPlain-") for t in topics) and groups
    [probe] = result["fall_behind"]["probes"]
    assert probe["fall_behind_bytes"] > 0 and probe["behind_messages"] > 0
    assert probe["lost_messages"] > 0
    assert probe["lost_messages"] == result["queue"]["lost_count"]
    assert probe["lost_within_reported"] + probe["lost_after_probe"] == probe["lost_messages"]


def test_run_refuses_a_cluster_of_the_wrong_shape(
        tmp_path: Path, clusters: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    """Scenario 6 needs ASYNC_MASTER: mqchaos will not run it on scenario 1's cluster (whole
    again after scenario 1: its master was restarted)."""
    code = main(["run", "--scenario", "kill-master-async", "--cluster-dir",
                 str(clusters["kill-master-sync"]), "--out", str(tmp_path / "run"),
                 "--duration", "5", "--quiet"])
    assert code == 3
    err = capsys.readouterr().err
    assert "runs SYNC_MASTER + SYNC_FLUSH; scenario kill-master-async needs ASYNC_MASTER" in err


def test_run_on_compose_without_its_containers_says_so(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A mixed-case project name is looked for as compose names it (lower-cased), and the
    hint says that name."""
    code = main(["run", "--scenario", "kill-master-sync", "--target", "compose",
                 "--namesrv", "127.0.0.1:1", "--compose-project", "MqChaos-No-Such-Project",
                 "--out", str(tmp_path / "run"), "--quiet"])
    assert code == 3
    err = capsys.readouterr().err
    assert "mqchaos run:" in err
    assert "has 0 containers" in err or "no Docker engine" in err or "SDK" in err
    if "has 0 containers" in err:
        assert "compose project mqchaos-no-such-project: service" in err
        assert "compose/compose.sh -p mqchaos-no-such-project up -d" in err
        assert "MqChaos" not in err
