"""mqcollect, mqlag and mqlagreport arguments, in-process (no Spark, no cluster): usage
and errors are headed by the script's name, bad values are usage errors (exit 2)."""

from __future__ import annotations

from pathlib import Path

import pytest

from spark_analytics import collect, lag, report


def usage_error(capsys: pytest.CaptureFixture[str], main: object, argv: list[str]) -> str:
    with pytest.raises(SystemExit) as exited:
        main(argv)  # type: ignore[operator]
    err = capsys.readouterr().err
    assert exited.value.code == 2, err
    assert "Traceback" not in err
    return err


@pytest.mark.parametrize("argv", [["--window", "0"], ["--window", "99999999999999999999"],
                                  ["--shuffle-partitions", "x"]])
def test_mqlag_bad_numbers(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    err = usage_error(capsys, lag.parse_args, ["--in", "a", "--out", "b", *argv])
    assert err.startswith("usage: mqlag ") and "mqlag: error: argument" in err


def test_mqlagreport_is_named_so(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    err = usage_error(capsys, report.main, [])
    assert err.startswith("usage: mqlagreport ") and "mqlagreport: error:" in err
    assert report.main(["--in", str(tmp_path)]) == 1
    assert capsys.readouterr().err.startswith("mqlagreport: no lag job outputs")


@pytest.mark.parametrize("argv", [["-n", ""], ["-n", "127.0.0.1:99999"],
                                  ["--interval", "0"], ["--timeout", "nan"],
                                  ["--timeout", "1e308"]])
def test_mqcollect_bad_arguments(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                 argv: list[str]) -> None:
    err = usage_error(capsys, collect.main, ["--out", str(tmp_path), "--once", *argv])
    assert "mqcollect: error: argument" in err
