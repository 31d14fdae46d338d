"""The report over the lag job's outputs for scenario.py: terminal table and HTML page."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from spark_analytics.report import Report, html_report

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_terminal_table_lists_worst_groups_queues_slaves_and_silent_brokers(
        outputs: Path, tmp_path: Path) -> None:
    page = tmp_path / "report.html"
    done = subprocess.run([sys.executable, "-m", "spark_analytics.report", "--in",
                           str(outputs), "--html", str(page)], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("Worst groups")
    assert lines[2].split()[:2] == ["REWIND", "G_REWIND"]  # the worst status first
    assert "Worst queues:" in lines and "Slaves (newest snapshot):" in lines
    slave_rows = lines[lines.index("Slaves (newest snapshot):") + 2:][:2]
    assert [r.split()[:4] for r in slave_rows] == [["broker-a", "2", "5000", "slave_max"],
                                                   ["broker-a", "1", "500", "ack"]]
    assert any(line.startswith("broker-c") and "DEADLINE_EXCEEDED" in line for line in lines)
    assert f"HTML report: {page.resolve()}" in lines
    assert page.read_text(encoding="utf-8").count("<svg") == 3
    # `mqlagreport --in DIR | head`: a reader gone at once is no BrokenPipeError traceback.
    read, write = os.pipe()
    os.close(read)
    try:
        piped = subprocess.run([sys.executable, "-m", "spark_analytics.report", "--in",
                                str(outputs)], cwd=REPO_ROOT, stdout=write,
                               stderr=subprocess.PIPE, text=True, timeout=60)
    finally:
        os.close(write)
    assert piped.returncode == 0 and piped.stderr == "", piped.stderr


def test_html_page_is_self_contained_with_charts_and_the_worst_group(outputs: Path) -> None:
    report = Report(outputs)
    assert report.worst_groups[0]["group"] == "G_REWIND"
    page = html_report(report, outputs)
    assert page.count("<svg") == 3 and page.count("<polyline") >= 8 + 2 + 1
    assert "Message lag per group over time" in page and "Fall-behind per slave" in page
    assert "G_REWIND" in page and "G_INTERP" in page
    assert 'class="status" style="background:#6a1b9a">REWIND' in page
    # nothing fetched from anywhere: no scripts, no external references
    assert "<script" not in page and not re.search(r"(src|href)=\"?(https?:|//)", page)


def test_report_without_outputs_says_so(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "spark_analytics.report", "--in",
                           str(tmp_path)], cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 1 and "no lag job outputs" in done.stderr


def test_a_series_with_a_hole_is_drawn_broken_and_keeps_its_colour() -> None:
    """A slave whose master did not answer for a while has no points there: its line stops
    and starts again instead of crossing the hole; a series' colour follows its name."""
    import datetime as dt

    from spark_analytics.charts import colour_of, line_chart

    def at(s: int) -> dt.datetime:
        return dt.datetime(2026, 1, 1, tzinfo=dt.UTC) + dt.timedelta(seconds=s)

    holed = [(at(10 * i), 5.0) for i in [*range(5), *range(30, 33)]]
    steady = [(at(10 * i), 1.0) for i in range(33)]
    page = line_chart("fall-behind", {"broker-b/1": holed, "broker-a/1": steady}, "bytes")
    assert page.count("<polyline") == 3  # two pieces of the holed line, one steady line
    alone = line_chart("fall-behind", {"broker-b/1": holed}, "bytes")
    assert f'stroke="{colour_of("broker-b/1")}"' in page and \
        f'stroke="{colour_of("broker-b/1")}"' in alone
