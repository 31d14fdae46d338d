"""mqadmin against a cluster with access control: global options before or after the
command, refusals reported (reason on stderr, exit 1), bad TLS files a one-line usage
error."""

from __future__ import annotations

from pathlib import Path

import pytest

from mqclient.admin import MQAdmin
from mqclient.cli import mqadmin
from tests.acl.conftest import CLUSTER_KEY, KEYS
from tests.support.brokers import broker_props, write_conf
from tests.support.processes import Processes
from tests.support.waiting import wait_until


@pytest.fixture(autouse=True)
def _no_env_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("MQ_ACCESS_KEY", "MQ_SECRET_KEY", "MQ_TLS_CA", "NAMESRV_ADDR"):
        monkeypatch.delenv(name, raising=False)


def test_global_options_before_or_after_the_command() -> None:
    parser = mqadmin.build_parser()
    before = parser.parse_args(["--accessKey", "K", "--secretKey", "S", "-n", "h:1",
                                "--tlsCa", "ca.pem", "--json", "clusterList"])
    after = parser.parse_args(["clusterList", "--accessKey", "K", "--secretKey", "S",
                               "-n", "h:1", "--tlsCa", "ca.pem", "--json"])
    for args in (before, after):
        assert (args.access_key, args.secret_key, args.namesrv, args.tls_ca, args.json) == (
            "K", "S", "h:1", "ca.pem", True)
    mixed = parser.parse_args(["--accessKey", "K", "topicRoute", "-t", "T", "--timeout", "2"])
    assert (mixed.access_key, mixed.secret_key, mixed.timeout, mixed.topic) == (
        "K", None, 2.0, "T")
    plain = parser.parse_args(["clusterList"])
    assert (plain.access_key, plain.namesrv, plain.json, plain.timeout) == (
        None, None, False, 5.0)


def test_unreadable_tls_ca_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    code = mqadmin.main(["clusterList", "-n", "127.0.0.1:1", "--tlsCa", "/nonexist.pem"])
    err = capsys.readouterr().err
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and "/nonexist.pem" in err
    assert "Traceback" not in err


def test_cluster_list_reports_refusals(processes: Processes, tmp_path: Path, acl_file: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    ns = processes.namesrv("--cluster-key", CLUSTER_KEY)
    processes.broker(write_conf(tmp_path / "broker.conf", broker_props(
        tmp_path / "store", namesrvAddr=ns.address, aclEnable=True, aclFile=acl_file,
        clusterKey=CLUSTER_KEY)))
    with MQAdmin(ns.address) as admin:
        wait_until(lambda: admin.cluster_info().groups, message="the broker registered")

    def run(*argv: str) -> tuple[int, str, str]:
        code = mqadmin.main(list(argv))
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    code, out, err = run("--accessKey", "admin", "--secretKey", KEYS["admin"],
                         "clusterList", "-n", ns.address)
    assert code == 0, err
    assert "UNREACHABLE" not in out and "MASTER" in out.upper()
    code, out, err = run("clusterList", "-n", ns.address)
    assert code == 1
    assert "UNREACHABLE" in out
    assert "UNAUTHENTICATED" in err and "no access key" in err
    assert "no broker answered" in err
    code, out, err = run("-n", ns.address, "--accessKey", "producer", "--secretKey",
                         KEYS["producer"], "clusterList")
    assert code == 1
    assert "PERMISSION_DENIED" in err and "not an admin" in err
    # A broker query refused by every broker is a failure with the refusal, not an empty
    # listing ("0 half message(s) without an outcome", exit 0).
    for credentials, reason in (((), "no access key"),
                                (("--accessKey", "producer", "--secretKey", KEYS["producer"]),
                                 "not an admin")):
        code, out, err = run("transactionStatus", "-n", ns.address, *credentials)
        assert code == 1, (out, err)
        assert "half message" not in out
        assert reason in err and "no broker answered (1 asked)" in err
