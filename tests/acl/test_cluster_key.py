"""The cluster key: a stranger can neither register a broker with a name server that has
--cluster-key nor pose as a slave on a master's HA port."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from acl.grpc_auth import ClientAuth
from broker.registration import RegistrationRefused
from ha.auth import sign_hello
from ha.codec import SlaveHello, encode_ack, encode_hello
from ha.master import HAService
from ha.slave import HAClient
from mqproto import namesrv_pb2, namesrv_pb2_grpc
from tests.acl.conftest import CLUSTER_KEY
from tests.broker.conftest import RPC_TIMEOUT_S, BrokerThread, Processes, broker_props
from tests.ha.conftest import MemoryStore, proven_hello

FILE = 64 * 1024
FAST = dict(heartbeat_interval=0.05, housekeeping_interval=1.0, poll_interval=0.01)
FAST_SLAVE = dict(report_interval=0.05, housekeeping_interval=1.0, reconnect_interval=0.05)


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
@contextlib.asynccontextmanager
async def master(store: MemoryStore) -> AsyncIterator[HAService]:
    service = HAService(store, host="127.0.0.1", cluster_key=CLUSTER_KEY,
                        **FAST)  # type: ignore[arg-type]
    await service.start()
    try:
        yield service
    finally:
        await service.stop()


async def wait_until_true(cond: object, timeout: float = 5.0) -> None:
    async with asyncio.timeout(timeout):
        while not cond():  # type: ignore[operator]
            await asyncio.sleep(0.01)


async def closed_without_data(port: int, first: bytes) -> bool:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(first)
        await writer.drain()
        async with asyncio.timeout(5):
            return await reader.read(65536) == b""
    finally:
        writer.close()


def test_slave_with_the_key_replicates_strangers_refused() -> None:
    async def run() -> None:
        m, s = MemoryStore(FILE), MemoryStore(FILE)
        m.fill(100_000)
        hello = SlaveHello(1, "broker-a", "127.0.0.1:10911")
        async with master(m) as service:
            client = HAClient(s, f"127.0.0.1:{service.port}", hello=hello,
                              cluster_key=CLUSTER_KEY, **FAST_SLAVE)  # type: ignore[arg-type]
            client.start()
            try:
                await wait_until_true(lambda: s.max_phy_offset == m.max_phy_offset)
            finally:
                await client.stop()
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
            problems = " ".join(st.problem for st in service.closed_links)
            problems += " ".join(st.problem for st in service.absent_slaves.values())
            assert "no hello proving the cluster key" in problems
            assert "replayed" in problems and "does not match" in problems

    asyncio.run(run())
