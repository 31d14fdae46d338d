"""Undecodable requests for every method of a gRPC service (issue 16 item 6): raw bytes
sent with the method's path, no serializer, so the server's decoder sees them as they are."""

from __future__ import annotations

import grpc
from google.protobuf.descriptor import FieldDescriptor, ServiceDescriptor

NOT_PROTOBUF = b"\xff\xff\xff\xff not protobuf"


def bad_utf8(message: object) -> bytes | None:
    """A message whose first string field holds bytes that are not UTF-8; None when the
    message has no string field."""
    for field in message.DESCRIPTOR.fields:  # type: ignore[attr-defined]
        if field.type == FieldDescriptor.TYPE_STRING:
            return bytes([field.number << 3 | 2, 2]) + b"\xff\xfe"
    return None


def bad_requests(service: ServiceDescriptor) -> list[tuple[str, bool, bytes]]:
    """(method path, server streaming, request bytes) of every method, twice when the
    request has a string field."""
    from google.protobuf import message_factory

    out = []
    for method in service.methods:
        path = f"/{service.full_name}/{method.name}"
        streaming = method.server_streaming
        out.append((path, streaming, NOT_PROTOBUF))
        request = message_factory.GetMessageClass(method.input_type)()
        utf8 = bad_utf8(request)
        if utf8 is not None:
            out.append((path, streaming, utf8))
    return out


def call_raw(channel: grpc.Channel, path: str, streaming: bool, payload: bytes
             ) -> grpc.RpcError:
    """The error the server answers `payload` with (AssertionError when it answers)."""
    try:
        if streaming:
            for _ in channel.unary_stream(path)(payload, timeout=10):
                pass
        else:
            channel.unary_unary(path)(payload, timeout=10)
    except grpc.RpcError as e:
        return e
    raise AssertionError(f"{path} answered undecodable bytes {payload!r}")
