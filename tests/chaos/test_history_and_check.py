"""The history file (written from threads, read back, broken files), and `mqchaos check` on a
kept history: summary, result.json, chart.png and exit codes."""

from __future__ import annotations

import json
import struct
import threading
import time
from pathlib import Path

import pytest

from chaos import report
from chaos.checker import check
from chaos.cli import main
from chaos.history import HistoryError, HistoryWriter, read_history
from chaos.workload import Throttle
from tests.chaos.histories import consume, failed, fault, invoke, sent


def write(path: Path, entries: list[dict]) -> Path:
    path.write_text("".join(json.dumps(e) + "\n" for e in entries))
    return path


def test_writer_keeps_entries_in_time_order_from_many_threads(tmp_path: Path) -> None:
    path = tmp_path / "h.jsonl"
    with HistoryWriter(path) as history:
        def work(n: int) -> None:
            for i in range(200):
                history.append(f"p{n}", "ok", "consume", {"id": f"k{n}#{i}"})
        threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    entries = read_history(path)
    assert len(entries) == 800
    assert [e["index"] for e in entries] == list(range(800))
    times = [e["time"] for e in entries]
    assert times == sorted(times)


def test_writer_refuses_an_unknown_type(tmp_path: Path) -> None:
    with HistoryWriter(tmp_path / "h.jsonl") as history, pytest.raises(ValueError):
        history.append("p0", "done", "send")


def test_a_broken_last_line_is_dropped_a_broken_middle_line_is_an_error(
        tmp_path: Path) -> None:
    good = json.dumps(invoke(1.0, "p0", "k", 0))
    (tmp_path / "cut.jsonl").write_text(good + "\n" + good[:20])  # killed while writing
    assert len(read_history(tmp_path / "cut.jsonl")) == 1
    (tmp_path / "bad.jsonl").write_text(good + "\n{oops\n" + good + "\n")
    with pytest.raises(HistoryError, match="line 2"):
        read_history(tmp_path / "bad.jsonl")
    (tmp_path / "shape.jsonl").write_text(json.dumps({"time": 1, "process": "p",
                                                      "type": "maybe", "f": "send"}) + "\n")
    with pytest.raises(HistoryError, match="line 1: unknown type"):
        read_history(tmp_path / "shape.jsonl")


def lossy_history() -> list[dict]:
    return [{"time": 0.0, "process": "runner", "type": "info", "f": "run",
             "value": {"phase": "start", "scenario": "kill-master-sync", "target": "local"}},
            *sent(1.0, 1.1, "producer-0", "k", 0), *sent(1.2, 1.3, "producer-0", "k", 1),
            fault(2.0, "start"), invoke(2.1, "producer-0", "k", 2),
            failed(2.5, "producer-0", "k", 2),
            *sent(2.6, 2.7, "producer-0", "k", 3, broker="broker-b"),
            consume(3.0, "k", 0, broker="broker-a"), consume(3.1, "k", 3, broker="broker-b"),
            consume(3.2, "k", 3, broker="broker-b"), fault(4.0, "end")]


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


def test_check_command_reports_the_loss_and_writes_the_outputs(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    history = write(tmp_path / "history.jsonl", lossy_history())
    out = tmp_path / "again"
    assert main(["check", str(history), "--out", str(out)]) == 1
    text = capsys.readouterr().out
    assert "kill-master-sync on local - FAILED" in text
    assert "lost: 1 ['k#1']" in text
    assert "duplicates: 1 messages, 1 extra deliveries (x2: 1; when: {" in text
    assert "#1 kill broker-a-0: from 2.0 s, healed at 4.0 s" in text
    assert "1 acknowledged messages lost" in text
    result = json.loads((out / "result.json").read_text())
    assert result["queue"]["lost"] == ["k#1"] and result["scenario"]["passed"] is False
    assert (out / "summary.txt").read_text().startswith("mqchaos: kill-master-sync")
    width, height = png_size(out / "chart.png")
    assert width > 800 and height > 500


def test_check_command_json_and_exit_zero_on_a_valid_history(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    history = write(tmp_path / "history.jsonl", [
        *sent(1.0, 1.1, "producer-0", "k", 0), consume(1.2, "k", 0)])
    assert main(["check", str(history), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["valid"] and "scenario" not in result


def test_check_command_on_a_missing_or_broken_file(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", str(tmp_path / "none.jsonl")]) == 3
    assert "mqchaos check:" in capsys.readouterr().err
    (tmp_path / "bad.jsonl").write_text("[1]\n[2]\n")
    assert main(["check", str(tmp_path / "bad.jsonl")]) == 3


def test_chart_of_a_history_without_sends(tmp_path: Path) -> None:
    entries = [fault(1.0, "start"), fault(2.0, "end")]
    assert report.chart(entries, check(entries), tmp_path / "c.png") == tmp_path / "c.png"
    png_size(tmp_path / "c.png")


def test_scenarios_command_lists_them(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["scenarios"]) == 0
    text = capsys.readouterr().out
    for name in ("kill-master-sync", "kill-master-async", "pause-slave", "kill-namesrv",
                 "cut-master-registration", "kill-restart-master"):
        assert name in text
    assert "compose/compose.sh --async up -d or mqcluster up" in text
    assert "compose/compose.sh up -d (local: none, it cuts the network)" in text


def test_a_network_cut_is_refused_on_the_local_target(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["run", "--scenario", "cut-master-registration", "--out", str(tmp_path),
                 "--quiet"])
    assert code == 3
    assert "only the compose target can" in capsys.readouterr().err


def test_throttle_limits_the_share_of_what_was_produced() -> None:
    produced = [10]
    throttle = Throttle(0.0, 0.5, lambda: produced[0])
    taken = []
    worker = threading.Thread(target=lambda: [throttle.acquire() or taken.append(1)
                                              for _ in range(8)], daemon=True)
    worker.start()
    time.sleep(0.3)
    assert len(taken) == 5  # half of 10
    produced[0] = 12
    time.sleep(0.3)
    assert len(taken) == 6
    throttle.off()
    worker.join(2)
    assert len(taken) == 8


def test_throttle_limits_the_rate_until_switched_off() -> None:
    throttle = Throttle(50.0)
    started = time.monotonic()
    for _ in range(20):
        throttle.acquire()
    assert time.monotonic() - started >= 0.38
    throttle.off()
    started = time.monotonic()
    for _ in range(1000):
        throttle.acquire()
    assert time.monotonic() - started < 0.5


@pytest.mark.parametrize("duration", ["0", "-5", "abc"])
def test_a_send_phase_that_is_not_above_zero_is_a_usage_error(
        duration: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`--duration 0` used to run the scenario's default 30 s instead."""
    with pytest.raises(SystemExit) as usage:
        main(["run", "--scenario", "kill-master-sync", "--duration", duration, "--out",
              str(tmp_path / "run")])
    assert usage.value.code == 2 and "--duration" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("argv", [["--producers", "99999999999999999999"],
                                  ["--consumers", "257"], ["--duration", "nan"],
                                  ["--duration", "1e308"], ["--rate", "inf"],
                                  ["--body-size", "99999999999"], ["--consume-ratio", "x"]])
def test_run_numbers_out_of_range_are_usage_errors(
        argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["run", "--scenario", "kill-master-sync", *argv])
    err = capsys.readouterr().err
    assert exited.value.code == 2 and f"error: argument {argv[0]}" in err, err


def test_a_reader_that_closed_the_pipe_is_no_error(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """`mqchaos check H --json | head`: BrokenPipeError is the reader having had enough,
    not a failure to run (exit 3 'mqchaos check: [Errno 32] Broken pipe')."""
    import sys

    history = write(tmp_path / "history.jsonl", [
        *sent(1.0, 1.1, "producer-0", "k", 0), consume(1.2, "k", 0)])

    class ClosedPipe:
        def write(self, _text: str) -> int:
            raise BrokenPipeError(32, "Broken pipe")

        def flush(self) -> None:
            raise BrokenPipeError(32, "Broken pipe")

        def fileno(self) -> int:
            raise ValueError("no descriptor")

    monkeypatch.setattr(sys, "stdout", ClosedPipe())
    assert main(["check", str(history), "--json"]) == 0
    assert capsys.readouterr().err == ""
