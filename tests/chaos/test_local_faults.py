"""The local injector's refusals (its kills, pauses and restarts of real processes run in
test_scenarios_local.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from chaos.faults import FaultError, FaultNotSupported
from chaos.local_faults import LocalInjector


def test_local_injector_needs_a_running_cluster(tmp_path: Path) -> None:
    with pytest.raises(FaultError, match="no mqcluster runs"):
        LocalInjector(tmp_path)
    (tmp_path / "mqcluster.state.json").write_text('{"layout": {}, "processes": []}')
    with pytest.raises(FaultError, match="not an mqcluster state file"):
        LocalInjector(tmp_path)


def test_local_targets_cannot_cut_a_node_off_the_network() -> None:
    injector = object.__new__(LocalInjector)  # the method needs no cluster to refuse
    with pytest.raises(FaultNotSupported, match="local targets cannot cut"):
        injector.disconnect("broker-a-0")
