"""The v2 endpoint with tlsEnable: the unmodified SDK over TLS (its CA given by gRPC's
GRPC_DEFAULT_SSL_ROOTS_FILE_PATH), the broker reaching its TLS name server; plaintext
clients refused. With aclEnable the endpoint stays off (accounts are not checked there
yet)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import grpc
import pytest

from mqclient.admin import MQAdmin
from mqproto.v2 import service_pb2 as S
from mqproto.v2 import service_pb2_grpc
from remoting.tls import make_local_ca
from tests.proxy.conftest import Sdk
from tests.support.brokers import broker_props, write_conf
from tests.support.ports import free_port
from tests.support.processes import Processes


def test_the_sdk_sends_and_receives_over_tls(sdk: Sdk, tmp_path: Path) -> None:
    ca, cert, key = make_local_ca(tmp_path / "ca")
    procs = Processes(tmp_path)
    try:
        ns = procs.namesrv("--tls-cert", str(cert), "--tls-key", str(key))
        port = free_port()
        procs.broker(write_conf(tmp_path / "broker.conf", broker_props(
            tmp_path / "store", brokerName="broker-a", namesrvAddr=ns.address,
            flushDiskType="ASYNC_FLUSH", autoCreateTopicEnable=True, tlsEnable=True,
            tlsCertPath=cert, tlsKeyPath=key, tlsCaPath=ca, grpcProxyPort=port)))
        endpoint = f"127.0.0.1:{port}"
        with MQAdmin(ns.address, tls_ca=str(ca)) as admin:  # mqadmin over TLS too
            admin.create_topic("V2Tls", read_queue_nums=2, write_queue_nums=2)
        tls_sdk = dataclasses.replace(sdk, env={"MQ_SDK_TLS": "1",
                                                "GRPC_DEFAULT_SSL_ROOTS_FILE_PATH": str(ca)})
        sent = tls_sdk.send(endpoint, "V2Tls", [{"body": f"tls{i}"} for i in range(3)])
        got = tls_sdk.receive(endpoint, "V2Tls", "GroupTls", count=3, ack="all")
        assert sorted(m["body"] for m in got) == ["tls0", "tls1", "tls2"]
        assert {m["id"] for m in got} == {s["id"] for s in sent}
        # A plaintext client gets no answer from the TLS port.
        with grpc.insecure_channel(endpoint) as channel, pytest.raises(grpc.RpcError):
            service_pb2_grpc.MessagingServiceStub(channel).QueryRoute(
                S.QueryRouteRequest(), timeout=5)
    finally:
        procs.stop_all()
