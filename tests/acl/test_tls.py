"""TLS on a broker's gRPC port and the HA port: clients that trust the CA are served; a
client without it, or speaking plaintext, is refused with a clear error and the broker
keeps serving; mutual TLS refuses a client without a certificate."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from ha.codec import SlaveHello
from mqclient.admin import AdminError, MQAdmin
from mqproto import admin_pb2, admin_pb2_grpc, common_pb2
from remoting.tls import ClientTls, ServerTls, grpc_channel, make_local_ca
from tests.ha.conftest import MemoryStore, master, slave
from tests.support.brokers import RPC_TIMEOUT_S, BrokerThread, broker_props

CaFiles = tuple[Path, Path, Path]


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> CaFiles:
    return make_local_ca(tmp_path_factory.mktemp("tls") / "ca")


@pytest.fixture(scope="module")
def other_ca(tmp_path_factory: pytest.TempPathFactory) -> CaFiles:
    return make_local_ca(tmp_path_factory.mktemp("tls") / "other")


@pytest.fixture
def tls_broker(tmp_path: Path, ca: CaFiles) -> Iterator[BrokerThread]:
    ca_pem, cert, key = ca
    b = BrokerThread(broker_props(tmp_path / "store", tlsEnable=True, tlsCertPath=cert,
                                  tlsKeyPath=key, tlsCaPath=ca_pem))
    yield b
    b.stop()


def topic_list(address: str, tls: ClientTls | None) -> grpc.StatusCode:
    channel = grpc_channel(address, tls)
    try:
        r = admin_pb2_grpc.AdminServiceStub(channel).GetTopicList(
            admin_pb2.GetTopicListRequest(), timeout=3)
        assert r.status.code == common_pb2.SUCCESS
        return grpc.StatusCode.OK
    except grpc.RpcError as e:
        return e.code()  # type: ignore[attr-defined,no-any-return]
    finally:
        channel.close()


def test_clients_verify_the_broker(tls_broker: BrokerThread, ca: CaFiles,
                                   other_ca: CaFiles) -> None:
    address = tls_broker.address
    assert topic_list(address, ClientTls(str(ca[0]))) is grpc.StatusCode.OK
    # a client that does not trust this CA, and a plaintext one: refused
    assert topic_list(address, ClientTls(str(other_ca[0]))) is grpc.StatusCode.UNAVAILABLE
    assert topic_list(address, None) is grpc.StatusCode.UNAVAILABLE
    with MQAdmin("", timeout=3) as admin, pytest.raises(AdminError, match="TLS port"):
        admin.broker_runtime(address)  # plaintext: the error says what to do
    # the broker keeps serving
    assert topic_list(address, ClientTls(str(ca[0]))) is grpc.StatusCode.OK


def test_send_channel_over_tls(tls_broker: BrokerThread, ca: CaFiles) -> None:
    from mqclient.send_channel import BlockingSendConnections, SendChannelClosed
    from mqproto import messaging_pb2
    from remoting.framing import KIND_SEND_BATCH, encode_batch_message

    channel = tls_broker.controller.send_channel_addr
    assert channel
    request = messaging_pb2.SendBatchRequest(
        producer_group="PG", topic="TlsTopic", queue_id=0, default_topic_queue_nums=1,
        encoded_messages=encode_batch_message(0, b"x", b""), born_timestamp=1
    ).SerializeToString()
    plain = BlockingSendConnections()
    with pytest.raises((SendChannelClosed, TimeoutError, ConnectionError)):
        plain.request(channel, KIND_SEND_BATCH, request, 3)
    plain.close()
    secure = BlockingSendConnections(ssl_context=ClientTls(str(ca[0])).ssl_context())
    try:
        for _ in range(2):  # the second reuses the pooled TLS connection
            r = messaging_pb2.SendBatchResponse.FromString(
                secure.request(channel, KIND_SEND_BATCH, request, RPC_TIMEOUT_S))
            assert r.status.code == common_pb2.SUCCESS, r.status
    finally:
        secure.close()


def test_mutual_tls_needs_a_client_certificate(tmp_path: Path, ca: CaFiles) -> None:
    ca_pem, cert, key = ca
    b = BrokerThread(broker_props(tmp_path / "store", tlsEnable=True, tlsCertPath=cert,
                                  tlsKeyPath=key, tlsCaPath=ca_pem, tlsMutual=True))
    try:
        assert topic_list(b.address, ClientTls(str(ca_pem))) is grpc.StatusCode.UNAVAILABLE
        assert topic_list(b.address, ClientTls(str(ca_pem), str(cert), str(key))
                          ) is grpc.StatusCode.OK
    finally:
        b.stop()


def test_ha_link_over_tls(ca: CaFiles) -> None:
    ca_pem, cert, key = ca
    server = ServerTls(str(cert), str(key), str(ca_pem))

    async def run() -> None:
        m, s = MemoryStore(64 * 1024), MemoryStore(64 * 1024)
        m.fill(100_000)
        async with master(m, ssl_context=server.ssl_context()) as service:
            # plaintext on the TLS port: the handshake fails, nothing is sent
            reader, writer = await asyncio.open_connection("127.0.0.1", service.port)
            writer.write(b"\x00" * 64)
            try:
                async with asyncio.timeout(5):
                    answer = await reader.read(65536)
            except ConnectionResetError:
                answer = b""
            writer.close()
            assert answer == b"" or answer[0] == 0x15  # closed, or a TLS alert: no data
            assert not any(c.hello for c in service.connections)
            async with slave(s, service.port, hello=SlaveHello(1, "broker-a", "127.0.0.1:1"),
                             ssl_context=server.client().ssl_context()):
                async with asyncio.timeout(10):
                    while s.max_phy_offset != m.max_phy_offset:
                        await asyncio.sleep(0.01)
                assert s.content() == m.content()

    asyncio.run(run())



HANDSHAKE_PROBE = """
import sys
import {package}  # an entry point's first import
from concurrent import futures
import grpc
from mqproto import admin_pb2, admin_pb2_grpc
from remoting.tls import ClientTls, grpc_channel
cert, key, wrong_ca = sys.argv[1:4]
server = grpc.server(futures.ThreadPoolExecutor(2))
port = server.add_secure_port("127.0.0.1:0", grpc.ssl_server_credentials(
    [(open(key, "rb").read(), open(cert, "rb").read())]))
server.start()
channel = grpc_channel(f"127.0.0.1:{{port}}", ClientTls(wrong_ca))
try:
    admin_pb2_grpc.AdminServiceStub(channel).GetTopicList(admin_pb2.GetTopicListRequest(),
                                                          timeout=5)
except grpc.RpcError as e:
    print(e.code().name)
server.stop(0)
"""


@pytest.mark.parametrize("package", ["broker", "nameserver"])
def test_server_entry_points_quiet_grpc_handshake_logs(package: str, ca: CaFiles,
                                                       other_ca: CaFiles) -> None:
    """No gRPC log line per failed TLS handshake (GRPC_VERBOSITY=ERROR set before grpc is
    imported), unless the user set GRPC_VERBOSITY."""
    import os
    import subprocess
    import sys

    _, cert, key = ca
    argv = [sys.executable, "-c", HANDSHAKE_PROBE.format(package=package), str(cert),
            str(key), str(other_ca[0])]
    env = {k: v for k, v in os.environ.items() if k != "GRPC_VERBOSITY"}
    quiet = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    assert quiet.stdout.strip() == "UNAVAILABLE", quiet.stderr
    assert "Handshake failed" not in quiet.stderr
    chosen = subprocess.run(argv, env={**env, "GRPC_VERBOSITY": "INFO"},
                            capture_output=True, text=True, timeout=60)
    assert "Handshake failed" in chosen.stderr
