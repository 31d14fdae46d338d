"""Unchecked inputs and O(queues) work of a broker in this process (issue 16 items 5-7)."""

from __future__ import annotations

from collections.abc import Callable

import grpc
import pytest

from mqproto import admin_pb2, common_pb2, messaging_pb2
from tests.broker.conftest import BrokerThread
from tests.proto.undecodable import bad_requests, call_raw

M = messaging_pb2
A = admin_pb2
C = common_pb2
Start = Callable[..., BrokerThread]


def test_undecodable_requests_answer_invalid_argument(start_broker: Start,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    """Item 6: bytes that are not the request (not protobuf, bad UTF-8 in a string field)
    answer INVALID_ARGUMENT with a one-line reason on every method of both services, and
    log one line without a traceback."""
    b = start_broker()
    requests = []
    for service in (messaging_pb2.DESCRIPTOR.services_by_name["MessagingService"],
                    admin_pb2.DESCRIPTOR.services_by_name["AdminService"]):
        requests += bad_requests(service)
    assert len(requests) > 40
    with caplog.at_level("INFO"):
        for path, streaming, payload in requests:
            e = call_raw(b.channel, path, streaming, payload)
            assert e.code() is grpc.StatusCode.INVALID_ARGUMENT, (path, e)
            assert "undecodable" in e.details() and "\n" not in e.details(), e.details()
            if payload.endswith(b"\xff\xfe"):
                assert "UTF-8" in e.details(), e.details()
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"
    assert len([r for r in caplog.records if "undecodable request" in r.getMessage()]) == 1
    r = b.admin.GetRuntimeInfo(A.GetRuntimeInfoRequest(), timeout=10)
    assert r.status.code == C.SUCCESS
