"""`mqcluster up --console`: the console is one of the cluster's processes (status lists it,
`down` stops it), on a free loopback port, asking the cluster's name server."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

from tests.support.processes import LocalCluster


def test_up_with_console_starts_it_and_down_stops_it(tmp_path: Path) -> None:
    with LocalCluster(tmp_path / "cluster", "--groups", "1", "--console") as local:
        assert "Console: http://127.0.0.1:" in local.up_result.stdout
        console = next(p for p in local.processes if p["kind"] == "console")
        assert console["alive"] and console["address"].startswith("127.0.0.1:")
        with urllib.request.urlopen(f"http://{console['address']}/api/cluster",
                                    timeout=10) as r:
            cluster = json.load(r)
        assert [(b["broker_name"], b["role"]) for b in cluster["brokers"]] == [
            ("broker-a", "ASYNC_MASTER")]
        status = local.mqcluster("status").stdout
        assert "console-0" in status and "CONSOLE" in status
    state = tmp_path / "cluster" / "mqcluster.state.json"
    assert not state.exists()
