"""Command-line argument checking without a cluster: every bad value is one usage line and
exit 2 (argparse), an error nobody expected one line and exit 1, never a traceback."""

from __future__ import annotations

import argparse

import pytest

from mqclient.admin import MQAdmin
from mqclient.cli import arguments, mqadmin

HUGE = "99999999999999999999999"


def usage_error(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    with pytest.raises(SystemExit) as exited:
        mqadmin.main(argv)
    err = capsys.readouterr().err
    assert exited.value.code == 2, err
    assert "Traceback" not in err
    [message] = [line for line in err.splitlines() if "error:" in line]
    return message


@pytest.mark.parametrize(("argv", "says"), [
    (["consumeMessage", "-t", "Orders", "-o", HUGE], "-o/--offset: 9999"),
    (["consumeMessage", "-t", "Orders", "-i", "-1"], "is below 0"),
    (["consumeMessage", "-t", "Orders", "-c", "2147483648"], "is above 2147483647"),
    (["sendMessage", "-t", "T", "-p", "x", "-b", "broker-a", "-i", "99999999999999999999"],
     "-i/--qid"),
    (["updateTopic", "-t", "H", "-c", "DefaultCluster", "-r", "99999999999999999999"],
     "-r/--readQueueNums"),
    (["updateTopic", "-t", "H", "-w", "2147483648"], "-w/--writeQueueNums"),
    (["removeSlave", "-b", "127.0.0.1:10911", "-i", "99999999999999999999"], "-i/--brokerId"),
    (["removeSlave", "-b", "127.0.0.1:10911", "-i", "x"], "'x' is not a whole number"),
    (["resetOffsetByTime", "-g", "G", "-t", "T", "-s", "9223372036854775808"],
     "epoch ms out of range"),
])
def test_numbers_out_of_range_are_usage_errors(capsys: pytest.CaptureFixture[str],
                                               argv: list[str], says: str) -> None:
    assert says in usage_error(capsys, [*argv, "-n", "127.0.0.1:1"])


@pytest.mark.parametrize("timeout", ["-1", "0", "nan", "inf", "1e308", "3601", "soon"])
def test_timeout_must_be_positive_finite_and_bounded(capsys: pytest.CaptureFixture[str],
                                                     timeout: str) -> None:
    assert "--timeout" in usage_error(capsys, ["--timeout", timeout, "topicList", "-n",
                                               "127.0.0.1:1"])
    assert mqadmin.build_parser().parse_args(
        ["topicList", "--timeout", "0.5"]).timeout == 0.5


@pytest.mark.parametrize(("argv", "says"), [
    (["topicList", "-n", "127.0.0.1:99999"], "port 99999 is not 1..65535"),
    (["topicList", "-n", "127.0.0.1:0"], "port 0 is not 1..65535"),
    (["topicList", "-n", "garbage"], "'garbage' is not HOST:PORT"),
    (["topicList", "-n", "127.0.0.1:9876;bad host:1"], "'bad host:1' is not HOST:PORT"),
    (["topicList", "-n", ""], "empty"),
    (["topicList", "-n", " ; "], "empty"),
    (["brokerStatus", "-b", "notahost", "-n", "127.0.0.1:1"], "'notahost' is not HOST:PORT"),
    (["haStatus", "-b", "127.0.0.1:1;x", "-n", "127.0.0.1:1"], "'x' is not HOST:PORT"),
    (["updateTopic", "-t", "T", "-b", "h:70000", "-n", "127.0.0.1:1"], "port 70000"),
    (["removeSlave", "-b", ":1", "-i", "1", "-n", "127.0.0.1:1"], "':1' is not HOST:PORT"),
    (["transactionStatus", "-b", "h", "-n", "127.0.0.1:1"], "'h' is not HOST:PORT"),
    (["queryMsgById", "-i", "zzzz", "-n", "127.0.0.1:1"], "is not an offsetMsgId"),
    (["queryMsgById", "-i", "7F00000100002A9F000000000000000", "-n", "127.0.0.1:1"],
     "is not an offsetMsgId"),
])
def test_addresses_and_ids_are_checked_as_arguments(capsys: pytest.CaptureFixture[str],
                                                    argv: list[str], says: str) -> None:
    assert says in usage_error(capsys, argv)


def test_good_addresses_and_ids_pass() -> None:
    parse = mqadmin.build_parser().parse_args
    args = parse(["haStatus", "-b", "127.0.0.1:10911; broker-1.local:10911;[::1]:10911",
                  "-n", "ns1:9876;ns2:9876"])
    assert args.namesrv == "ns1:9876;ns2:9876"
    assert args.broker_addr.startswith("127.0.0.1:10911")
    assert parse(["queryMsgById", "-i", "7F00000100002A9F0000000000000000"]).msg_id \
        == "7F00000100002A9F0000000000000000"
    assert arguments.offset_msg_id("ab" * 28) == "ab" * 28
    with pytest.raises(argparse.ArgumentTypeError):
        arguments.host_port("127.0.0.1:")


def test_an_unexpected_error_is_one_line_and_exit_1(capsys: pytest.CaptureFixture[str],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(self: MQAdmin) -> list[str]:
        raise ValueError("Value out of range")

    monkeypatch.setattr(MQAdmin, "topic_list", broken)
    monkeypatch.delenv("MQ_DEBUG", raising=False)
    assert mqadmin.main(["topicList", "-n", "127.0.0.1:1"]) == 1
    err = capsys.readouterr().err
    assert err.splitlines() == ["mqadmin topicList: unexpected error: ValueError: Value out "
                                "of range (set MQ_DEBUG=1 for the traceback)"]
    monkeypatch.setenv("MQ_DEBUG", "1")
    assert mqadmin.main(["topicList", "-n", "127.0.0.1:1"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" in err and err.endswith("for the traceback)\n")


def test_mqdemo_and_mqspark_check_their_numbers(capsys: pytest.CaptureFixture[str]) -> None:
    from mqclient import demo
    from spark_analytics import standalone

    for main, argv, says in ((demo.main, ["--messages", "0"], "mqdemo: error: argument"),
                             (demo.main, ["--messages", HUGE], "--messages"),
                             (standalone.main, ["start", "--timeout", "nan"], "--timeout"),
                             (standalone.main, ["stop", "--timeout", "0"], "--timeout")):
        with pytest.raises(SystemExit) as exited:
            main(argv)
        err = capsys.readouterr().err
        assert exited.value.code == 2 and says in err, (argv, err)
