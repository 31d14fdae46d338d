"""When the v2 endpoint does not start (pure: no broker)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from proxy.server import GrpcProxy


@pytest.mark.parametrize(("port", "acl", "tls"), [(0, False, False), (-1, True, False),
                                                  (12345, False, True)])
def test_no_v2_endpoint_when_off_or_with_acl_or_tls(port: int, acl: bool, tls: bool) -> None:
    broker: Any = SimpleNamespace(config=SimpleNamespace(
        grpc_proxy_port=port, acl_enable=acl, tls_enable=tls, listen_port=0))
    assert asyncio.run(GrpcProxy.start_for(broker, sender=None)) is None  # type: ignore[arg-type]
