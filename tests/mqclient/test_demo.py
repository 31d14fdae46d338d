"""The README's main job (`make run` = `python -m mqclient.demo`) end to end: it starts a
local cluster, produces, consumes, prints consumer progress, collects snapshots, runs the
Spark lag job and prints its report, and leaves the cluster running; the test then stops
that cluster by the PIDs mqcluster recorded."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from spark_analytics.session import java_problem
from tests.support.processes import REPO_ROOT, stop_local_cluster

pytestmark = pytest.mark.spark  # `make run`'s lag job starts a JVM


@pytest.mark.timeout(900)  # the lag job starts a JVM: slow on a loaded 2-core machine
def test_main_job_produces_consumes_and_reports_the_lag(tmp_path: Path) -> None:
    directory = tmp_path / "cluster"
    try:
        run = subprocess.run([sys.executable, "-m", "mqclient.demo", "--dir", str(directory),
                              "--messages", "400"], cwd=REPO_ROOT, capture_output=True,
                             text=True, timeout=840)
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
        out = run.stdout
        assert "consumed 400 of the 400 messages sent now in" in out
        assert "Consume Diff Total: 100" in out  # the messages sent while nobody consumed
        assert "mqcluster down --dir" in out
        # Both slaves linked and caught up when haStatus prints (one that tried before its
        # master listened reconnects only after 5 s: the demo waits for it).
        ha = out[out.index("== mqadmin haStatus"):]
        assert "(no slave)" not in ha and ha.count(" connected") >= 4, ha
        # Snapshots one a second from before the first send to the end: the lag chart has
        # history (it had 3 snapshots 2 s apart of a lag that did not move).
        taken = re.search(r"^(\d+) collector snapshots, one every 1 s while the demo ran",
                          out, re.M)
        assert taken is not None and int(taken[1]) >= 6, out
        if java_problem() is None:  # the lag job's report: DemoGroup 100 behind, its page
            report = out[out.index("Worst groups"):]
            assert re.search(r"^\w+\s+DemoGroup\s+normal\s+\d+\s+100\s", report, re.M), report
            page = Path(out.split("file://")[1].split()[0])
            assert page.is_file() and "DemoGroup" in page.read_text()
            # The lag rose while the last 100 messages went out over 5 s: DemoGroup's line
            # has several distinct values, ending at 100.
            lag_chart = page.read_text().split("<svg")[1]
            demo_line = re.search(r'points="([^"]*)"><title>DemoGroup<', lag_chart)
            assert demo_line is not None
            heights = {xy.split(",")[1] for xy in demo_line[1].split()}
            assert len(heights) >= 3, demo_line[1]
            assert re.search(r"DemoGroup</text><text [^>]*>100</text>", lag_chart)
        # The web console it started shows DemoGroup 100 behind.
        console = re.search(r"^The web console: (http://\S+)", out, re.M)
        assert console is not None, out
        with urllib.request.urlopen(f"{console[1]}api/groups/DemoGroup", timeout=10) as r:
            assert json.load(r)["message_lag"] == 100
        state = json.loads((directory / "mqcluster.state.json").read_text())
        # 1 name server, 2 masters, 2 slaves and the console: left running
        assert len(state["processes"]) == 6
    finally:
        if (directory / "mqcluster.state.json").exists():
            stop_local_cluster(directory)
