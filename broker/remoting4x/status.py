"""Our statuses (common.proto ResponseCode) as RocketMQ 4.x response codes."""

from __future__ import annotations

from mqproto import common_pb2
from remoting import codes

_CODES = {
    common_pb2.SUCCESS: codes.SUCCESS,
    common_pb2.SYSTEM_ERROR: codes.SYSTEM_ERROR,
    common_pb2.SYSTEM_BUSY: codes.SYSTEM_BUSY,
    common_pb2.REQUEST_CODE_NOT_SUPPORTED: codes.REQUEST_CODE_NOT_SUPPORTED,
    common_pb2.INVALID_PARAMETER: codes.SYSTEM_ERROR,
    common_pb2.NO_PERMISSION: codes.NO_PERMISSION,
    common_pb2.FLUSH_DISK_TIMEOUT: codes.FLUSH_DISK_TIMEOUT,
    common_pb2.FLUSH_SLAVE_TIMEOUT: codes.FLUSH_SLAVE_TIMEOUT,
    common_pb2.SLAVE_NOT_AVAILABLE: codes.SLAVE_NOT_AVAILABLE,
    common_pb2.SERVICE_NOT_AVAILABLE: codes.SERVICE_NOT_AVAILABLE,
    common_pb2.MESSAGE_ILLEGAL: codes.MESSAGE_ILLEGAL,
    common_pb2.PROPERTIES_SIZE_EXCEEDED: codes.MESSAGE_ILLEGAL,
    common_pb2.OS_PAGECACHE_BUSY: codes.SYSTEM_BUSY,
    common_pb2.TOPIC_NOT_EXIST: codes.TOPIC_NOT_EXIST,
    common_pb2.SUBSCRIPTION_GROUP_NOT_EXIST: codes.SUBSCRIPTION_GROUP_NOT_EXIST,
    common_pb2.SUBSCRIPTION_PARSE_FAILED: codes.SUBSCRIPTION_PARSE_FAILED,
    common_pb2.QUERY_NOT_FOUND: codes.QUERY_NOT_FOUND,
    common_pb2.CONSUMER_NOT_ONLINE: codes.CONSUMER_NOT_ONLINE,
    # A pull's statuses.
    common_pb2.NO_NEW_MSG: codes.PULL_NOT_FOUND,
    common_pb2.NO_MATCHED_MSG: codes.PULL_RETRY_IMMEDIATELY,
    common_pb2.OFFSET_ILLEGAL: codes.PULL_OFFSET_MOVED,
}


def response_code(status_code: int) -> int:
    """RocketMQ's response code for one of ours (SYSTEM_ERROR for those it has none of)."""
    return _CODES.get(status_code, codes.SYSTEM_ERROR)
