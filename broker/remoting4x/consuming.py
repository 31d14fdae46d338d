"""PULL_MESSAGE (11) with long polling, consumer offsets (14, 15), queue offsets and times
(29-32) and CONSUMER_SEND_MSG_BACK (36), through the broker's pull and send processors,
offset table and store.

A pull answers the stored records themselves (RocketMQ's layout: the client decodes them,
inflating compressed bodies). Its header values go as strings: the C++ client reads only
string values.
"""

from __future__ import annotations

import logging
import struct
from typing import TYPE_CHECKING

from broker.clients import QueueLocks
from broker.remoting4x.status import response_code
from broker.status import RequestError
from mqproto import common_pb2, messaging_pb2
from remoting import codes
from remoting.command import RemotingCommand

if TYPE_CHECKING:
    from broker.context import BrokerContext
    from broker.pull import PullProcessor
    from broker.send import SendProcessor

log = logging.getLogger(__name__)

_PREFIX = struct.Struct(">iiiiiqqiq")  # up to the born timestamp
_PORT = struct.Struct(">i")
BORNHOST_V6 = 0x10
STOREHOST_V6 = 0x20


def with_store_port(records: bytes, port: int) -> bytes:
    """Stored records with their store host's port set to `port`: 4.x clients take a
    message's store host for the broker's address (send-back goes there; the offset
    message id is built from it), and the store keeps the gRPC port there."""
    if not records or port <= 0:
        return records
    out = bytearray(records)
    pos, end = 0, len(out)
    while pos + _PREFIX.size <= end:
        total, *_, sys_flag, _born = _PREFIX.unpack_from(out, pos)
        if total <= 0:
            break
        at = pos + _PREFIX.size + (20 if sys_flag & BORNHOST_V6 else 8) + 8
        at += 16 if sys_flag & STOREHOST_V6 else 4
        if at + 4 <= pos + total:
            _PORT.pack_into(out, at, port)
        pos += total
    return bytes(out)


# PullSysFlag bits
PULL_COMMIT_OFFSET = 0x1
PULL_SUSPEND = 0x2
PULL_SUBSCRIPTION = 0x4
PULL_CLASS_FILTER = 0x8


class RemotingConsume:
    def __init__(self, broker: BrokerContext, pull: PullProcessor, send: SendProcessor,
                 queue_locks: QueueLocks) -> None:
        self.broker = broker
        self.pull_processor = pull
        self.send = send
        self.queue_locks = queue_locks

    async def pull(self, cmd: RemotingCommand) -> RemotingCommand:
        sys_flag = cmd.ext_int("sysFlag", 0)
        if sys_flag & PULL_CLASS_FILTER:
            return cmd.response(codes.SYSTEM_ERROR, "class filters are not supported")
        request = messaging_pb2.PullMessageRequest(
            consumer_group=cmd.ext_str("consumerGroup"), topic=cmd.ext_str("topic"),
            queue_id=cmd.ext_int("queueId"), queue_offset=cmd.ext_int("queueOffset"),
            max_msg_nums=cmd.ext_int("maxMsgNums", 32),
            subscription=cmd.ext_str("subscription") or "*",
            expression_type=cmd.ext_str("expressionType") or "TAG",
            suspend_timeout_millis=(cmd.ext_int("suspendTimeoutMillis", 0)
                                    if sys_flag & PULL_SUSPEND else 0),
            raw_records=True)
        commit = cmd.ext_int("commitOffset", -1)
        if sys_flag & PULL_COMMIT_OFFSET and commit >= 0:
            request.commit_offset = commit
        answer = await self.pull_processor.pull(request)
        status = answer.status
        ext = {"suggestWhichBrokerId": answer.suggest_which_broker_id,
               "nextBeginOffset": answer.next_begin_offset,
               "minOffset": answer.min_offset, "maxOffset": answer.max_offset}
        if status.code != common_pb2.SUCCESS and status.code not in (
                common_pb2.NO_NEW_MSG, common_pb2.NO_MATCHED_MSG, common_pb2.OFFSET_ILLEGAL):
            return cmd.response(response_code(status.code), status.remark or None)
        return cmd.response(response_code(status.code), status.remark or None, ext,
                            with_store_port(answer.raw_records, self.remoting_port()))

    def remoting_port(self) -> int:
        _, _, port = self.broker.addresses.remoting_addr.rpartition(":")
        return int(port) if port.isdigit() else 0

    def _queue(self, cmd: RemotingCommand) -> tuple[str, int]:
        topic, queue_id = cmd.ext_str("topic"), cmd.ext_int("queueId")
        self.broker.check_queue(topic, queue_id)
        return topic, queue_id

    async def query_consumer_offset(self, cmd: RemotingCommand) -> RemotingCommand:
        """The group's committed offset; for a group with none, 0 while the queue still
        holds its first message (RocketMQ: a new group reads a young queue from the start),
        else QUERY_NOT_FOUND (the client then starts where its consumeFromWhere says)."""
        group = cmd.ext_str("consumerGroup")
        if not group:
            raise RequestError(common_pb2.INVALID_PARAMETER, "consumerGroup is required")
        topic, queue_id = self._queue(cmd)
        offset = self.broker.offsets.query_offset(group, topic, queue_id)
        if offset < 0:
            if self.broker.store.get_min_offset_in_queue(topic, queue_id) > 0:
                return cmd.response(codes.QUERY_NOT_FOUND,
                                    "Not found, V3_0_6_SNAPSHOT maybe this group consumer "
                                    "boot first")
            offset = 0
        return cmd.response(codes.SUCCESS, None, {"offset": offset})

    async def update_consumer_offset(self, cmd: RemotingCommand) -> RemotingCommand:
        group = cmd.ext_str("consumerGroup")
        topic, queue_id = cmd.ext_str("topic"), cmd.ext_int("queueId")
        self.broker.commit_offset(group, topic, queue_id, cmd.ext_int("commitOffset"))
        return cmd.response(codes.SUCCESS)

    async def max_offset(self, cmd: RemotingCommand) -> RemotingCommand:
        topic, queue_id = self._queue(cmd)
        return cmd.response(codes.SUCCESS, None, {
            "offset": self.broker.store.get_max_offset_in_queue(topic, queue_id)})

    async def min_offset(self, cmd: RemotingCommand) -> RemotingCommand:
        topic, queue_id = self._queue(cmd)
        return cmd.response(codes.SUCCESS, None, {
            "offset": self.broker.store.get_min_offset_in_queue(topic, queue_id)})

    async def search_offset(self, cmd: RemotingCommand) -> RemotingCommand:
        topic, queue_id = self._queue(cmd)
        offset = self.broker.store.get_offset_in_queue_by_time(topic, queue_id,
                                                              cmd.ext_int("timestamp"))
        return cmd.response(codes.SUCCESS, None, {"offset": offset})

    async def earliest_msg_store_time(self, cmd: RemotingCommand) -> RemotingCommand:
        topic, queue_id = self._queue(cmd)
        store = self.broker.store
        stamp = store.get_message_store_timestamp(
            topic, queue_id, store.get_min_offset_in_queue(topic, queue_id))
        return cmd.response(codes.SUCCESS, None, {"timestamp": max(stamp, 0)})

    async def send_back(self, cmd: RemotingCommand) -> RemotingCommand:
        request = messaging_pb2.ConsumerSendMsgBackRequest(
            consumer_group=cmd.ext_str("group"), commit_log_offset=cmd.ext_int("offset"),
            origin_message_id=cmd.ext_str("originMsgId"),
            origin_topic=cmd.ext_str("originTopic"),
            delay_level=cmd.ext_int("delayLevel", 0))
        max_times = cmd.ext_int("maxReconsumeTimes", -1)
        if max_times >= 0:
            request.max_reconsume_times = max_times
        status = await self.send.send_back(request)
        return cmd.response(response_code(status.code), status.remark or None)
