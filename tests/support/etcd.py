"""Real etcd for tests: `etcd` (one member) and `etcd3` (three) on free loopback ports in
the test's temp dir, always stopped after it. On a machine without etcd (the set-up,
scripts/ensure-etcd.sh, could not install it) the test is skipped with the reason."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from controller.etcd_process import EtcdCluster, EtcdUnavailable
from tests.support.ports import free_ports


def start_etcd(directory: Path, members: int) -> EtcdCluster:
    try:
        cluster = EtcdCluster(directory, members, ports=free_ports(2 * members))
    except EtcdUnavailable as e:
        pytest.skip(f"etcd is not installed: {e}")
    return cluster.start()


@pytest.fixture
def etcd(tmp_path: Path) -> Iterator[EtcdCluster]:
    cluster = start_etcd(tmp_path / "etcd", 1)
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def etcd3(tmp_path: Path) -> Iterator[EtcdCluster]:
    cluster = start_etcd(tmp_path / "etcd", 3)
    try:
        yield cluster
    finally:
        cluster.stop()
