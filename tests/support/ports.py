"""Free ports for servers a test starts on fixed ports: mqcluster's picks, outside the kernel's
ephemeral range, so an outgoing connection or another test's bind(0) cannot take one first."""

from __future__ import annotations

from mqclient.cli.local_cluster import free_ports

__all__ = ["free_port", "free_ports"]


def free_port() -> int:
    return free_ports(1)[0]
