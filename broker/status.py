"""Response codes of the broker: store statuses mapped onto common.proto's ResponseCode."""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from mqproto import common_pb2, messaging_pb2
from store.constants import GetMessageStatus, PutMessageStatus

log = logging.getLogger(__name__)

ResponseCode = int  # a common_pb2.ResponseCode value
Response = TypeVar("Response")
Handler = Callable[[Any, Any, Any], Awaitable[Response]]


class RequestError(Exception):
    """A request the broker refuses; answered with `code` and `remark`, never a gRPC error."""

    def __init__(self, code: ResponseCode, remark: str) -> None:
        super().__init__(remark)
        self.code = code
        self.remark = remark

    def status(self) -> common_pb2.Status:
        return common_pb2.Status(code=self.code, remark=self.remark)


def ok() -> common_pb2.Status:
    return common_pb2.Status(code=common_pb2.SUCCESS)


def status(code: ResponseCode, remark: str = "") -> common_pb2.Status:
    return common_pb2.Status(code=code, remark=remark)


# PutMessageStatus -> ResponseCode. PUT_OK is SUCCESS; the next three mean "stored, but
# without the durability asked for" and still carry a send result.
PUT_STATUS_CODES: dict[PutMessageStatus, ResponseCode] = {
    PutMessageStatus.PUT_OK: common_pb2.SUCCESS,
    PutMessageStatus.FLUSH_DISK_TIMEOUT: common_pb2.FLUSH_DISK_TIMEOUT,
    PutMessageStatus.FLUSH_SLAVE_TIMEOUT: common_pb2.FLUSH_SLAVE_TIMEOUT,
    PutMessageStatus.SLAVE_NOT_AVAILABLE: common_pb2.SLAVE_NOT_AVAILABLE,
    PutMessageStatus.SERVICE_NOT_AVAILABLE: common_pb2.SERVICE_NOT_AVAILABLE,
    PutMessageStatus.CREATE_MAPPED_FILE_FAILED: common_pb2.CREATE_MAPPED_FILE_FAILED,
    PutMessageStatus.MESSAGE_ILLEGAL: common_pb2.MESSAGE_ILLEGAL,
    PutMessageStatus.PROPERTIES_SIZE_EXCEEDED: common_pb2.PROPERTIES_SIZE_EXCEEDED,
    PutMessageStatus.OS_PAGECACHE_BUSY: common_pb2.OS_PAGECACHE_BUSY,
    PutMessageStatus.UNKNOWN_ERROR: common_pb2.UNKNOWN_ERROR,
}

STORED_STATUSES = frozenset({
    PutMessageStatus.PUT_OK,
    PutMessageStatus.FLUSH_DISK_TIMEOUT,
    PutMessageStatus.FLUSH_SLAVE_TIMEOUT,
    PutMessageStatus.SLAVE_NOT_AVAILABLE,
})

_PUT_REMARKS: dict[PutMessageStatus, str] = {
    PutMessageStatus.FLUSH_DISK_TIMEOUT: "stored, but not flushed to disk within "
                                         "syncFlushTimeout",
    PutMessageStatus.FLUSH_SLAVE_TIMEOUT: "stored, but no slave acked it in time",
    PutMessageStatus.SLAVE_NOT_AVAILABLE: "stored, but no slave is available",
    PutMessageStatus.SERVICE_NOT_AVAILABLE: "service not available now: the store is "
                                            "shut down, a slave, or not writeable",
    PutMessageStatus.CREATE_MAPPED_FILE_FAILED: "create mapped file failed, the disk may be "
                                                "full",
    PutMessageStatus.MESSAGE_ILLEGAL: "the message is illegal",
    PutMessageStatus.PROPERTIES_SIZE_EXCEEDED: "the message properties are too large",
    PutMessageStatus.OS_PAGECACHE_BUSY: "[PC_SYNCHRONIZED]broker busy, start flow control "
                                        "for a while",
    PutMessageStatus.UNKNOWN_ERROR: "unknown error while putting the message",
}


def put_status(put: PutMessageStatus, detail: str = "") -> common_pb2.Status:
    """The reply status of a put: its code (named as the put status) and the reason, the
    store's when it gave one. The remark is the reason only: clients print `CODE: remark`
    (it read "SERVICE_NOT_AVAILABLE: SERVICE_NOT_AVAILABLE: ..." when it named it too)."""
    return status(PUT_STATUS_CODES[put], detail or _PUT_REMARKS.get(put, ""))


GET_STATUS_PROTO: dict[GetMessageStatus, int] = {
    s: messaging_pb2.GetMessageStatus.Value(s.value) for s in GetMessageStatus
}


def pull_code(get: GetMessageStatus, requested_offset: int) -> ResponseCode:
    """PullMessageProcessor's mapping of the store's GetMessageStatus."""
    S = GetMessageStatus
    if get is S.FOUND:
        return common_pb2.SUCCESS
    if get in (S.NO_MATCHED_MESSAGE, S.MESSAGE_WAS_REMOVING):
        return common_pb2.NO_MATCHED_MSG
    if get in (S.OFFSET_OVERFLOW_ONE, S.OFFSET_FOUND_NULL):
        return common_pb2.NO_NEW_MSG
    if get in (S.NO_MATCHED_LOGIC_QUEUE, S.NO_MESSAGE_IN_QUEUE):
        return common_pb2.OFFSET_ILLEGAL if requested_offset != 0 else common_pb2.NO_NEW_MSG
    # OFFSET_TOO_SMALL, OFFSET_OVERFLOW_BADLY
    return common_pb2.OFFSET_ILLEGAL


async def answer(response_type: type[Response], name: str,
                 request: Awaitable[Response]) -> Response:
    """`request`'s reply: a RequestError becomes a reply with its code and remark, an
    unexpected exception a SYSTEM_ERROR reply (logged with its traceback)."""
    try:
        return await request
    except RequestError as e:
        return response_type(status=e.status())  # type: ignore[call-arg]
    except asyncio.CancelledError:
        raise
    except Exception as e:
        log.exception("%s failed", name)
        return response_type(status=unexpected(name, e))  # type: ignore[call-arg]


def unexpected(name: str, error: Exception) -> common_pb2.Status:
    """The SYSTEM_ERROR status of a request `name` that raised `error` unexpectedly."""
    return status(common_pb2.SYSTEM_ERROR, f"{name} failed: {error!r}")


def rpc(response_type: type[Response]) -> Callable[[Handler[Response]], Handler[Response]]:
    """Wraps a servicer method in `answer`: the broker keeps serving whatever it raises."""

    def decorate(fn: Handler[Response]) -> Handler[Response]:
        @functools.wraps(fn)
        async def wrapper(self: Any, request: Any, context: Any) -> Response:
            return await answer(response_type, fn.__name__, fn(self, request, context))

        return wrapper

    return decorate
