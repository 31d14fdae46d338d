"""The C++ client with session credentials against a broker with aclEnable: its 4.x
signatures are verified and the account's permissions decide, as for our own protocol."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.acl.conftest import CLUSTER_KEY, KEYS, write_accounts
from tests.remoting4x.conftest import Cluster, Cpp
from tests.support.brokers import Node, broker_props, write_conf
from tests.support.processes import Processes

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def acl_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    tmp = tmp_path_factory.mktemp("cpp-acl")
    procs = Processes(tmp)
    try:
        namesrv = procs.namesrv("--cluster-key", CLUSTER_KEY)
        conf = write_conf(tmp / "broker.conf", broker_props(
            tmp / "store", namesrvAddr=namesrv.address, aclEnable=True,
            aclFile=write_accounts(tmp / "plain_acl.json"), clusterKey=CLUSTER_KEY,
            autoCreateTopicEnable=True))
        broker = procs.broker(conf)
        yield Cluster(namesrv, broker, Node(broker.address))
    finally:
        procs.stop_all()


def test_signed_sends_and_consumption_within_the_account_s_rights(
        cpp: Cpp, acl_cluster: Cluster) -> None:
    producer = ["producer", KEYS["producer"]]
    consumer = ["consumer", KEYS["consumer"]]
    ok = cpp.send(acl_cluster.namesrv_addr, "orders",
                  [{"body": f"o{i}", "tags": "T"} for i in range(3)], credentials=producer)
    assert [r.get("status") for r in ok] == ["OK"] * 3, ok
    denied = cpp.send(acl_cluster.namesrv_addr, "secret", [{"body": "no"}],
                      credentials=producer)
    assert "error" in denied[0], denied
    unsigned = cpp.send(acl_cluster.namesrv_addr, "orders", [{"body": "anon"}])
    assert "error" in unsigned[0], unsigned
    got = cpp.received(cpp.push(acl_cluster.namesrv_addr, "orders", "billing", expect=3,
                                credentials=consumer))
    assert sorted(m["body"] for m in got) == ["o0", "o1", "o2"]
    log = acl_cluster.broker.log_text()
    assert "Traceback" not in log
