"""The host's address is the local address towards the name servers, written once for the
broker and the clients; brokerIP1 / client_ip override it; nothing is aimed outside the
cluster's own hosts (issue 16, item 10)."""

from __future__ import annotations

import fcntl
import socket
import struct
from collections.abc import Callable

import pytest

from mqclient.instance import CLIENT_IP_ENV, ClientInstance
from mqclient.producer import Producer
from remoting.local_address import local_ip
from tests.support.brokers import BrokerThread

Start = Callable[..., BrokerThread]
SIOCGIFADDR = 0x8915


def host_ipv4_addresses() -> list[str]:
    """Every IPv4 address of this host's interfaces (Linux)."""
    found = []
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for _, name in socket.if_nameindex():
            try:
                packed = fcntl.ioctl(s.fileno(), SIOCGIFADDR,
                                     struct.pack("256s", name.encode()[:15]))
            except OSError:  # no IPv4 address
                continue
            found.append(socket.inet_ntoa(packed[20:24]))
    return found


@pytest.fixture
def connects(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Where sockets of this process connect to during the test."""
    seen: list[object] = []
    real = socket.socket.connect

    def recording(self: socket.socket, address: object) -> None:
        seen.append(address)
        real(self, address)

    monkeypatch.setattr(socket.socket, "connect", recording)
    return seen


def test_the_address_towards_each_name_server_and_nothing_aimed_elsewhere(
        connects: list[object]) -> None:
    addresses = host_ipv4_addresses()
    assert "127.0.0.1" in addresses
    for ip in addresses:
        assert local_ip([f"{ip}:9876"]) == ip
    assert local_ip(["no-such-host.invalid:9876", "127.0.0.1:9876"]) == "127.0.0.1"
    local_ip([])  # no name server: the host name's address or loopback, no socket
    assert {a[0] for a in connects} <= set(addresses)  # type: ignore[index]


def test_a_broker_without_broker_ip1_advertises_its_address_towards_the_name_server(
        start_broker: Start) -> None:
    others = [ip for ip in host_ipv4_addresses() if not ip.startswith("127.")]
    for ip in ["127.0.0.1", *others]:
        b = start_broker(brokerIP1="", namesrvAddr=f"{ip}:1")  # nobody listens: no matter
        try:
            assert b.address.rpartition(":")[0] == ip
        finally:
            b.stop()
    b = start_broker(brokerIP1="127.0.0.9", namesrvAddr="127.0.0.1:1")
    assert b.address.startswith("127.0.0.9:")


def test_client_ids_take_the_address_towards_the_name_server_or_the_setting(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(CLIENT_IP_ENV, raising=False)
    for ip in host_ipv4_addresses():
        assert ClientInstance(f"{ip}:1").client_id.startswith(f"{ip}@")
    assert ClientInstance("127.0.0.1:1", client_ip="10.9.8.7").client_id.startswith("10.9.8.7@")
    monkeypatch.setenv(CLIENT_IP_ENV, "10.1.2.3")
    assert ClientInstance("127.0.0.1:1").client_ip == "10.1.2.3"
    producer = Producer("PG", "127.0.0.1:1", client_ip="10.9.8.7")
    assert producer.instance.client_id.startswith("10.9.8.7@")
    assert producer.new_message_id.take(1)[0].startswith("0A090807")
