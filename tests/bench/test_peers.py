"""bench.peers: the report from a hand-written result, and a --quick smoke run (class a,
the peers that are installed here; the others are reported as skipped)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bench.peers import CLASSES, report

REPO_ROOT = Path(__file__).resolve().parents[2]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _figures(scale: float) -> dict[str, float]:
    return {"one_at_a_time_msgs_s": 1000 * scale, "one_at_a_time_p50_ms": 1.0,
            "one_at_a_time_p99_ms": 2.0, "in_flight_msgs_s": 10_000 * scale,
            "many_topics_msgs_s": 9_500 * scale, "many_topics_vs_1": 0.95,
            "consume_msgs_s": 20_000 * scale}


def _result() -> dict[str, Any]:
    return {
        "started": "2026-01-01T00:00:00Z", "quick": True, "classes": CLASSES,
        "sizes": {"topics": 256}, "machine": {"cpu_model": "test", "cores": 2},
        "peers": {
            "ours": {"status": "ran", "classes": {
                "a": {"status": "ok", "setting": "ASYNC_FLUSH", "figures": _figures(3.0),
                      "cpu_us_per_message": {"one_at_a_time": {"server_us": 315.0,
                                                               "client_us": 135.0}}},
                "b": {"status": "ok", "setting": "SYNC_FLUSH", "figures": _figures(1.0)}}},
            "redis": {"status": "ran", "classes": {
                "a": {"status": "ok", "setting": "everysec", "figures": _figures(1.0)},
                "b": {"status": "failed", "setting": "always", "error": "boom"}}},
            "jetstream": {"status": "ran", "classes": {
                "a": {"status": "ok", "setting": "default", "figures": _figures(2.0)},
                "b": {"status": "n/a", "reason": "old server"}}},
            "rabbitmq": {"status": "skipped", "reason": "not installed: epmd",
                         "classes": {}}}}


def test_ratios_take_the_best_peer_of_the_same_class() -> None:
    ratios = report.ratios(_result())
    a = ratios["a"]["in_flight"]
    assert a["best_peer"] == "jetstream" and a["ratio"] == 1.5
    assert a["goal"] == 2.0 and a["met"] is False
    assert ratios["a"]["one_at_a_time"]["met"] is True  # 3.0 / 2.0 >= 1.5
    assert ratios["a"]["many_topics"]["goal"] is None
    assert ratios["a"]["many_topics_vs_1"] == {"ours": 0.95, "goal": 0.9, "met": True}
    # class b: no peer has a figure, so no ratio and no verdict
    assert ratios["b"]["consume"]["ratio"] is None and ratios["b"]["consume"]["met"] is None


def test_a_failed_peer_leaves_its_class_unjudged() -> None:
    """Redis failed in (a): the best remaining peer may not be the best peer, so the goals
    of (a) are not judged, and the table says why."""
    result = _result()
    result["peers"]["redis"]["classes"]["a"] = {"status": "failed", "setting": "everysec",
                                                "error": "connection refused"}
    result["ratios"] = report.ratios(result)
    one = result["ratios"]["a"]["one_at_a_time"]
    assert one["best_peer"] == "jetstream" and one["met"] is None
    assert one["failed_peers"] == ["redis"]
    assert "? (redis failed)" in report.table(result)


def test_bad_dir_and_out_are_refused_before_any_work(tmp_path: Path) -> None:
    a_file = tmp_path / "file"
    a_file.write_text("")
    for args, message in ((["--dir", str(tmp_path / "missing")], "not a directory"),
                          (["--dir", str(a_file)], "not a directory"),
                          (["--out", str(a_file)], "a file, not a directory"),
                          (["--out", ""], "--out: empty")):
        run = subprocess.run([sys.executable, "-m", "bench.peers", "--quick", *args],
                             cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
        assert run.returncode == 1 and message in run.stderr, (args, run.stderr)
        assert "Traceback" not in run.stderr


def test_ours_stops_its_cluster_when_up_fails_half_way(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`mqcluster up` raising (the disk filled while it started processes) still gets its
    `down`: no process of ours is left running."""
    from bench.peers import ours

    calls: list[str] = []

    def fake_main(argv: list[str]) -> int:
        calls.append(argv[0])
        if argv[0] == "up":
            raise OSError(28, "No space left on device")
        return 0

    monkeypatch.setattr(ours.mqcluster, "main", fake_main)
    with pytest.raises(OSError, match="No space"), ours.open_target("a", tmp_path):
        pass
    assert calls == ["up", "down"]


def test_table_and_chart_show_every_peer(tmp_path: Path) -> None:
    result = _result()
    result["ratios"] = report.ratios(result)
    text = report.table(result)
    for word in ("skipped: not installed: epmd", "n/a: old server", "failed: boom",
                 "Best peer", "ours 256 topics / 1", "315 + 135"):
        assert word in text
    report.chart(result, tmp_path / "chart.png")
    assert (tmp_path / "chart.png").read_bytes().startswith(PNG_MAGIC)


def _positive_numbers(figures: dict[str, float]) -> bool:
    return all(isinstance(v, float | int) and math.isfinite(v) and v > 0
               for v in figures.values())


def _quick_run(tmp_path: Path, peers: list[str]) -> dict[str, Any]:
    out = tmp_path / "out"
    run = subprocess.run([sys.executable, "-m", "bench.peers", "--quick", "--classes", "a",
                          "--peers", ",".join(peers), "--out", str(out),
                          "--dir", str(tmp_path)],
                         cwd=REPO_ROOT, capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert f"{peers[0]} (a) " in run.stdout  # progress lines while it runs
    result: dict[str, Any] = json.loads((out / "peers.json").read_text())
    assert (out / "peers.png").read_bytes().startswith(PNG_MAGIC)
    assert "(a) acknowledged in memory" in (out / "peers.txt").read_text()
    assert set(result["peers"]) == set(peers)
    assert result["machine"]["cores"] >= 1 and result["machine"]["cpu_model"]
    for name, entry in result["peers"].items():
        if entry["status"] == "skipped":
            assert entry["reason"], name
            continue
        a = entry["classes"]["a"]
        assert a["status"] == "ok", (name, a)
        assert _positive_numbers(a["figures"]), (name, a["figures"])
    assert list(tmp_path.glob("bench-peers-*")) == []  # the work directory is removed
    return result


def test_quick_run_writes_every_file_with_positive_figures(tmp_path: Path) -> None:
    """Ours against the peers that start in about a second (RabbitMQ takes ~20 s: below)."""
    result = _quick_run(tmp_path, ["ours", "jetstream", "redis"])
    assert result["peers"]["ours"]["classes"]["a"]["status"] == "ok"
    assert "Best peer" in report.table(result)


@pytest.mark.skipif(os.environ.get("BENCH_PEERS_RABBITMQ") != "1",
                    reason="RabbitMQ boots in ~20 s: set BENCH_PEERS_RABBITMQ=1 to run it")
def test_quick_run_of_rabbitmq(tmp_path: Path) -> None:
    _quick_run(tmp_path, ["rabbitmq"])
