"""mqchaos on a compose project named in mixed case, as a person types it (`-p trialA`):
compose labels its containers with the lower-cased name, and mqchaos finds them by that
name. The run's topics and groups are gone from the cluster afterwards (no later lag report
shows them). One compose cluster of its own (the image built once per session, as in
tests/compose)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from chaos.cli import main
from chaos.constants import HISTORY_FILE, RESULT_FILE
from chaos.history import read_history
from tests.chaos.leftovers import chaos_names, cleanup_note
from tests.chaos.test_scenarios_compose import down
from tests.compose.cluster import BASE_FILE, ComposeCluster
from tests.compose.conftest import compose_image, compose_tool, docker_client  # noqa: F401
from tests.compose.roundtrip import wait_for_slaves_in_sync

pytestmark = pytest.mark.timeout(900)  # may build the images from nothing


MIXED_CASE = f"MqTrialA{os.getpid()}{uuid.uuid4().hex[:6]}"


@pytest.fixture
def cluster(docker_client: docker.DockerClient, compose_tool: list[str],  # noqa: F811
            compose_image: str) -> Iterator[ComposeCluster]:  # noqa: F811
    """`compose -p MqTrialA...` up; the harness then looks for compose's lower-cased name."""
    c = ComposeCluster(compose_tool, compose_image, docker_client, project=MIXED_CASE,
                       files=[BASE_FILE])
    try:
        c.compose("up", "-d")
        c.project = MIXED_CASE.lower()
        assert c.containers(), "compose labels the project with its lower-cased name"
        c.wait_healthy()
        wait_for_slaves_in_sync(c.namesrv_addr)
        yield c
    finally:
        c.project = MIXED_CASE.lower()
        down(c)


def test_mixed_case_project_name_is_found_and_the_run_leaves_nothing(
        cluster: ComposeCluster, tmp_path: Path) -> None:
    out = tmp_path / "run"
    # No --namesrv: the name servers' published ports are looked up through Docker too.
    code = main(["run", "--scenario", "pause-slave", "--target", "compose",
                 "--compose-project", MIXED_CASE, "--duration", "20", "--out", str(out),
                 "--quiet"])
    assert code in (0, 1), code  # it ran (3: it could not, e.g. found no containers)
    history = read_history(out / HISTORY_FILE)
    assert (out / RESULT_FILE).exists() and len(history) > 100
    note = cleanup_note(history)
    assert note is not None and note["problems"] == [], note
    assert any(t.startswith("ChaosPlain-") for t in note["deleted"])
    assert chaos_names(cluster.namesrv_addr) == (set(), set())
