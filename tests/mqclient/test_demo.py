"""The README's main job (`make run` = `python -m mqclient.demo`) end to end: it starts a
local cluster, produces, consumes, prints consumer progress and leaves the cluster running;
the test then stops that cluster by the PIDs mqcluster recorded."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.broker.conftest import REPO_ROOT
from tests.processes import stop_local_cluster


def test_main_job_produces_consumes_and_reports_the_lag(tmp_path: Path) -> None:
    directory = tmp_path / "cluster"
    try:
        run = subprocess.run([sys.executable, "-m", "mqclient.demo", "--dir", str(directory),
                              "--messages", "400"], cwd=REPO_ROOT, capture_output=True,
                             text=True, timeout=240)
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
        out = run.stdout
        assert "consumed 400 of the 400 messages sent now in" in out
        assert "Consume Diff Total: 100" in out  # the messages sent while nobody consumed
        assert "mqcluster down --dir" in out
        # Both slaves linked and caught up when haStatus prints (one that tried before its
        # master listened reconnects only after 5 s: the demo waits for it).
        ha = out[out.index("== mqadmin haStatus"):]
        assert "(no slave)" not in ha and ha.count(" connected") >= 4, ha
        state = json.loads((directory / "mqcluster.state.json").read_text())
        assert len(state["processes"]) == 5  # 1 name server, 2 masters, 2 slaves: left running
    finally:
        if (directory / "mqcluster.state.json").exists():
            stop_local_cluster(directory)
