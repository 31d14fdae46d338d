"""The cluster key: a stranger can neither register a broker with a name server that has
--cluster-key nor pose as a slave on a master's HA port."""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
import pytest

from acl.grpc_auth import ClientAuth
from broker.registration import RegistrationRefused
from ha.auth import sign_hello
from ha.codec import SlaveHello, encode_ack, encode_hello
from mqproto import namesrv_pb2, namesrv_pb2_grpc
from tests.acl.conftest import CLUSTER_KEY
from tests.ha.conftest import MemoryStore, master, proven_hello, slave
from tests.support.brokers import RPC_TIMEOUT_S, BrokerThread, broker_props
from tests.support.processes import Processes
from tests.support.waiting import wait_until_async

FILE = 64 * 1024


# -- name server -------------------------------------------------------------------------------
def fake_registration() -> namesrv_pb2.RegisterBrokerRequest:
    return namesrv_pb2.RegisterBrokerRequest(cluster_name="TestCluster", broker_name="evil",
                                             broker_addr="10.6.6.6:10911", broker_id=0)


def test_stranger_cannot_register_a_broker(processes: Processes, tmp_path: Path) -> None:
    ns = processes.namesrv("--cluster-key", CLUSTER_KEY)
    channel = grpc.insecure_channel(ns.address)
    wrong = ClientAuth.cluster("not-the-cluster-key")
    assert wrong is not None
    try:
        stub = namesrv_pb2_grpc.NamesrvServiceStub(channel)
        for s in (stub, namesrv_pb2_grpc.NamesrvServiceStub(wrong.intercept(channel))):
            with pytest.raises(grpc.RpcError) as e:
                s.RegisterBroker(fake_registration(), timeout=RPC_TIMEOUT_S)
            assert e.value.code() is grpc.StatusCode.UNAUTHENTICATED, e.value
        # reading routes needs no key
        r = stub.GetClusterInfo(namesrv_pb2.GetClusterInfoRequest(), timeout=RPC_TIMEOUT_S)
        assert "evil" not in str(r)
        # a broker with the key registers; one with another key does not start
        good = BrokerThread(broker_props(tmp_path / "good", namesrvAddr=ns.address,
                                         clusterKey=CLUSTER_KEY))
        try:
            r = stub.GetClusterInfo(namesrv_pb2.GetClusterInfoRequest(),
                                    timeout=RPC_TIMEOUT_S)
            assert "broker-a" in str(r)
        finally:
            good.stop()
        with pytest.raises(RegistrationRefused, match="UNAUTHENTICATED"):
            BrokerThread(broker_props(tmp_path / "bad", namesrvAddr=ns.address,
                                      brokerName="broker-b", clusterKey="another-key-123"))
    finally:
        channel.close()
    assert "refused" in ns.log_text()


# -- HA ----------------------------------------------------------------------------------------
async def closed_without_data(port: int, first: bytes) -> bool:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(first)
        await writer.drain()
        async with asyncio.timeout(5):
            return await reader.read(65536) == b""
    finally:
        writer.close()


def test_slave_with_the_key_replicates_strangers_refused(
        caplog: pytest.LogCaptureFixture) -> None:
    async def run() -> None:
        m, s = MemoryStore(FILE), MemoryStore(FILE)
        m.fill(100_000)
        hello = SlaveHello(1, "broker-a", "127.0.0.1:10911")
        async with master(m, cluster_key=CLUSTER_KEY) as service:
            async with slave(s, service.port, hello=hello, cluster_key=CLUSTER_KEY):
                await wait_until_async(lambda: s.max_phy_offset == m.max_phy_offset)
            # no hello: a 4.x-style ack first
            assert await closed_without_data(service.port, encode_ack(0))
            # a hello without proof, and one signed with another key
            assert await closed_without_data(service.port, proven_hello(m, m.max_phy_offset))
            wrong = sign_hello(SlaveHello(2, "broker-a", "10.6.6.6:1"), "another-key-123")
            assert await closed_without_data(service.port, encode_hello(wrong))
            # a captured good hello, replayed
            good = encode_hello(sign_hello(SlaveHello(3, "broker-a", "10.0.0.3:1"),
                                           CLUSTER_KEY))
            reader, writer = await asyncio.open_connection("127.0.0.1", service.port)
            writer.write(good + encode_ack(0))
            await writer.drain()
            async with asyncio.timeout(5):
                assert await reader.read(65536) != b""  # data flows on the first
            writer.close()
            assert await closed_without_data(service.port, good + encode_ack(0))
            # the refused links are logged, not listed as slaves (haStatus): only slave 1
            # (gone) and slave 3 (its first, good link) are
            problems = caplog.text
            listed = service.slave_statuses()
            assert sorted(st.broker_id for st in listed) == [1, 3], listed
            assert "no hello proving the cluster key" in problems
            assert "replayed" in problems and "does not match" in problems

    asyncio.run(run())
