"""The address this host is reached by (RocketMQ's RemotingUtil.getLocalAddress), written
once for the broker's brokerIP1 default and the clients' ids and message ids.

It is the local address of a socket connected to a name server: the interface the host
reaches the cluster through, also inside a container or on a host with several networks.
The socket is a UDP one: connecting it sends nothing, the kernel only picks the route, so
nothing is aimed at any address outside the cluster's own hosts. brokerIP1 (brokers) and
`client_ip` / MQCLIENT_IP (clients) override it.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable

LOOPBACK = "127.0.0.1"


def split_host_port(address: str) -> tuple[str, int] | None:
    """("host", port) of `host:port` or `[v6]:port`; None when it is not one."""
    host, sep, port = address.strip().rpartition(":")
    if not sep or not host or not port.isdigit():
        return None
    return host.strip("[]"), int(port)


def address_towards(address: str) -> str | None:
    """The local address of a socket connected to `address` (host:port), None when there
    is no route (or the host does not resolve)."""
    parsed = split_host_port(address)
    if parsed is None:
        return None
    try:
        infos = socket.getaddrinfo(*parsed, type=socket.SOCK_DGRAM)
    except (OSError, UnicodeError):
        return None
    infos.sort(key=lambda info: info[0] != socket.AF_INET)  # IPv4 first
    for family, _, _, _, sockaddr in infos:
        try:
            with socket.socket(family, socket.SOCK_DGRAM) as s:
                s.connect(sockaddr)  # UDP: no packet is sent
                local = s.getsockname()[0]
        except OSError:
            continue
        if not ipaddress.ip_address(local).is_unspecified:
            return str(local)
    return None


def local_ip(namesrv_addrs: Iterable[str] = ()) -> str:
    """The local address towards the first name server that has a route; without one, the
    host name's address unless it is loopback; else 127.0.0.1."""
    for address in namesrv_addrs:
        local = address_towards(address)
        if local is not None:
            return local
    try:
        addr = socket.gethostbyname(socket.gethostname())
        if not ipaddress.ip_address(addr).is_loopback:
            return addr
    except (OSError, ValueError):
        pass
    return LOOPBACK
