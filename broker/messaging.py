"""gRPC face of the broker's MessagingService: send and pull (in send.py / pull.py),
queries, offsets and client heartbeats.

Every reply carries a Status; a refused request never becomes a gRPC error and never
stops the broker (see status.rpc).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import grpc

from broker.clients import GroupEvent, QueueLocks
from broker.constants import DEFAULT_QUERY_MAX_NUM, MAX_QUERY_NUM, RETRY_GROUP_TOPIC_PREFIX
from broker.convert import message_to_proto, peer_host
from broker.pull import PullProcessor
from broker.send import SendProcessor
from broker.status import RequestError, ok, rpc, status
from broker.transaction.checks import TRANSACTION_STATES
from mqproto import common_pb2, messaging_pb2, messaging_pb2_grpc

if TYPE_CHECKING:
    from broker.context import BrokerContext

log = logging.getLogger(__name__)
M = messaging_pb2
Context = grpc.aio.ServicerContext


class MessagingServicer(messaging_pb2_grpc.MessagingServiceServicer):
    """Method names are the RPC names of messaging.proto."""

    def __init__(self, broker: BrokerContext) -> None:
        self.broker = broker
        self.send = SendProcessor(broker)
        self.pull = PullProcessor(broker)
        self.queue_locks = QueueLocks(broker.clock_ms)
        broker.clients.consumer_left.append(self.queue_locks.release_client)

    # -- send / pull -----------------------------------------------------------------------
    @rpc(M.SendMessageResponse)
    async def SendMessage(self, request: M.SendMessageRequest, context: Context) -> Any:
        return await self.send.send_message(request, peer_host(context.peer()))

    @rpc(M.SendBatchResponse)
    async def SendBatch(self, request: M.SendBatchRequest, context: Context) -> Any:
        return await self.send.send_batch(request, peer_host(context.peer()))

    @rpc(M.GetSendChannelResponse)
    async def GetSendChannel(self, request: M.GetSendChannelRequest, context: Context) -> Any:
        return M.GetSendChannelResponse(status=ok(),
                                        address=self.broker.addresses.send_channel_addr)

    @rpc(M.PullMessageResponse)
    async def PullMessage(self, request: M.PullMessageRequest, context: Context) -> Any:
        if request.HasField("commit_offset") and request.client_id:
            holder = self.queue_locks.holder_other_than(
                request.consumer_group, request.client_id, (request.topic, request.queue_id))
            if holder is not None:
                log.info("commit of %s %s-%d by %s ignored: the queue is locked by %s",
                         request.consumer_group, request.topic, request.queue_id,
                         request.client_id, holder)
                request.ClearField("commit_offset")
        return await self.pull.pull(request, context.time_remaining())

    # -- queries ---------------------------------------------------------------------------
    @rpc(M.QueryMessageByIdResponse)
    async def QueryMessageById(self, request: M.QueryMessageByIdRequest,
                               context: Context) -> Any:
        try:
            ext = self.broker.store.look_message_by_msg_id(request.offset_msg_id)
        except ValueError as e:
            raise RequestError(common_pb2.INVALID_PARAMETER, str(e)) from None
        if ext is None:
            return M.QueryMessageByIdResponse(status=status(
                common_pb2.QUERY_NOT_FOUND, f"no message with offsetMsgId {request.offset_msg_id}"))
        return M.QueryMessageByIdResponse(status=ok(), message=message_to_proto(ext))

    @rpc(M.QueryMessageByKeyResponse)
    async def QueryMessageByKey(self, request: M.QueryMessageByKeyRequest,
                                context: Context) -> Any:
        if not request.topic or not request.key:
            raise RequestError(common_pb2.INVALID_PARAMETER, "topic and key are required")
        store = self.broker.store
        max_num = min(request.max_num or DEFAULT_QUERY_MAX_NUM, MAX_QUERY_NUM)
        end = request.end_timestamp or 2**62
        found = store.query_message(request.topic, request.key, max_num,
                                    request.begin_timestamp, end)
        if request.unique_key:
            found = [m for m in found if m.uniq_key == request.key]
        index = store.index
        response = M.QueryMessageByKeyResponse(
            status=ok(), messages=[message_to_proto(m) for m in found],
            index_last_update_timestamp=index.last_timestamp_ms(),
            index_last_update_phy_offset=index.max_phy_offset())
        if not found:
            response.status.CopyFrom(status(
                common_pb2.QUERY_NOT_FOUND,
                f"no message of topic {request.topic} with key {request.key}"))
        return response

    @rpc(M.SearchOffsetByTimestampResponse)
    async def SearchOffsetByTimestamp(self, request: M.SearchOffsetByTimestampRequest,
                                      context: Context) -> Any:
        self.broker.check_queue(request.topic, request.queue_id)
        offset = self.broker.store.get_offset_in_queue_by_time(
            request.topic, request.queue_id, request.timestamp)
        return M.SearchOffsetByTimestampResponse(status=ok(), offset=offset)

    @rpc(M.GetMinOffsetResponse)
    async def GetMinOffset(self, request: M.GetMinOffsetRequest, context: Context) -> Any:
        self.broker.check_queue(request.topic, request.queue_id)
        offset = self.broker.store.get_min_offset_in_queue(request.topic, request.queue_id)
        return M.GetMinOffsetResponse(status=ok(), offset=offset)

    @rpc(M.GetMaxOffsetResponse)
    async def GetMaxOffset(self, request: M.GetMaxOffsetRequest, context: Context) -> Any:
        self.broker.check_queue(request.topic, request.queue_id)
        offset = self.broker.store.get_max_offset_in_queue(request.topic, request.queue_id)
        return M.GetMaxOffsetResponse(status=ok(), offset=offset)

    # -- consumer offsets ------------------------------------------------------------------
    @rpc(M.UpdateConsumerOffsetResponse)
    async def UpdateConsumerOffset(self, request: M.UpdateConsumerOffsetRequest,
                                   context: Context) -> Any:
        if request.client_id:
            holder = self.queue_locks.holder_other_than(
                request.consumer_group, request.client_id, (request.topic, request.queue_id))
            if holder is not None:
                raise RequestError(common_pb2.NO_PERMISSION, (
                    f"offset {request.commit_offset} of {request.consumer_group} "
                    f"{request.topic}-{request.queue_id} not committed: the queue is locked "
                    f"by {holder}, not {request.client_id}"))
        self.broker.commit_offset(request.consumer_group, request.topic, request.queue_id,
                                  request.commit_offset)
        return M.UpdateConsumerOffsetResponse(status=ok())

    @rpc(M.QueryConsumerOffsetResponse)
    async def QueryConsumerOffset(self, request: M.QueryConsumerOffsetRequest,
                                  context: Context) -> Any:
        if not request.consumer_group:
            raise RequestError(common_pb2.INVALID_PARAMETER, "consumer_group is required")
        self.broker.check_queue(request.topic, request.queue_id)
        offset = self.broker.offsets.query_offset(request.consumer_group, request.topic,
                                                  request.queue_id)
        if offset < 0:
            return M.QueryConsumerOffsetResponse(status=status(
                common_pb2.QUERY_NOT_FOUND,
                f"group {request.consumer_group} committed no offset for "
                f"{request.topic}-{request.queue_id}"))
        return M.QueryConsumerOffsetResponse(status=ok(), offset=offset)

    # -- clients ---------------------------------------------------------------------------
    @rpc(M.HeartbeatResponse)
    async def Heartbeat(self, request: M.HeartbeatRequest, context: Context) -> Any:
        if not request.client_id:
            raise RequestError(common_pb2.INVALID_PARAMETER, "client_id is required")
        for s in request.subscriptions:  # a bad SQL92 expression: refused, with where
            if s.expression_type:
                try:
                    self.broker.filters.check(s.expression_type, s.sub_string)
                except RequestError as e:
                    raise RequestError(e.code, f"subscription of {request.consumer_group} to "
                                                f"{s.topic}: {e.remark}") from None
        self.broker.clients.heartbeat(
            request.client_id, request.producer_group, request.consumer_group,
            {s.topic: s.sub_string for s in request.subscriptions})
        if any(s.topic == RETRY_GROUP_TOPIC_PREFIX + request.consumer_group
               for s in request.subscriptions):
            await self.send.ensure_retry_topic(request.consumer_group)
        return M.HeartbeatResponse(status=ok())

    @rpc(M.GetConsumerListByGroupResponse)
    async def GetConsumerListByGroup(self, request: M.GetConsumerListByGroupRequest,
                                     context: Context) -> Any:
        ids = self.broker.clients.consumer_ids(request.consumer_group)
        if not ids:
            return M.GetConsumerListByGroupResponse(status=status(
                common_pb2.CONSUMER_NOT_ONLINE,
                f"no consumer of group {request.consumer_group} is online"))
        return M.GetConsumerListByGroupResponse(status=ok(), consumer_id_list=ids)

    @rpc(M.UnregisterClientResponse)
    async def UnregisterClient(self, request: M.UnregisterClientRequest,
                               context: Context) -> Any:
        if not request.client_id:
            raise RequestError(common_pb2.INVALID_PARAMETER, "client_id is required")
        self.broker.clients.unregister(request.client_id, request.producer_group,
                                       request.consumer_group)
        return M.UnregisterClientResponse(status=ok())

    async def WatchConsumerGroup(self, request: M.WatchConsumerGroupRequest,
                                 context: Context) -> AsyncIterator[M.ConsumerGroupChanged]:
        group, client_id = request.consumer_group, request.client_id
        if not group or not client_id:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                "consumer_group and client_id are required")
        clients = self.broker.clients
        changes = clients.watch(group, client_id)
        closed = self.broker.pull_hold.closed_event
        waits: list[asyncio.Future[Any]] = []
        try:
            event = GroupEvent(clients.consumer_ids(group))
            while not closed.is_set():
                changed = M.ConsumerGroupChanged(consumer_group=group,
                                                 consumer_id_list=event.consumer_ids)
                if event.reset is not None:
                    changed.reset.topic = event.reset.topic
                    changed.reset.broker_name = event.reset.broker_name
                    changed.reset.offsets.update(event.reset.offsets)
                yield changed
                next_change = asyncio.ensure_future(changes.get())
                waits = [next_change, asyncio.ensure_future(closed.wait())]
                await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
                if not next_change.done():
                    break  # the broker is shutting down
                event = next_change.result()
        finally:
            for waiting in waits:
                waiting.cancel()
            clients.unwatch(group, client_id, changes)

    @rpc(M.ConsumerSendMsgBackResponse)
    async def ConsumerSendMsgBack(self, request: M.ConsumerSendMsgBackRequest,
                                  context: Context) -> Any:
        return M.ConsumerSendMsgBackResponse(status=await self.send.send_back(request))

    # -- orderly consumption ---------------------------------------------------------------
    @rpc(M.LockBatchMQResponse)
    async def LockBatchMQ(self, request: M.LockBatchMQRequest, context: Context) -> Any:
        if not request.consumer_group or not request.client_id:
            raise RequestError(common_pb2.INVALID_PARAMETER,
                               "consumer_group and client_id are required")
        by_key = {(mq.topic, mq.queue_id): mq for mq in request.mq_set}
        locked = self.queue_locks.try_lock_batch(request.consumer_group, request.client_id,
                                                 list(by_key))
        return M.LockBatchMQResponse(status=ok(), lock_ok_mq_set=[by_key[k] for k in locked])

    @rpc(M.UnlockBatchMQResponse)
    async def UnlockBatchMQ(self, request: M.UnlockBatchMQRequest, context: Context) -> Any:
        self.queue_locks.unlock_batch(request.consumer_group, request.client_id,
                                      [(mq.topic, mq.queue_id) for mq in request.mq_set])
        return M.UnlockBatchMQResponse(status=ok())

    # -- transactions (broker/transaction) -------------------------------------------------
    @rpc(M.EndTransactionResponse)
    async def EndTransaction(self, request: M.EndTransactionRequest, context: Context) -> Any:
        if not request.producer_group:
            raise RequestError(common_pb2.INVALID_PARAMETER, "producer_group is required")
        state = TRANSACTION_STATES.get(request.commit_or_rollback)
        if state is None:
            raise RequestError(common_pb2.INVALID_PARAMETER,
                               "commit_or_rollback must be COMMIT, ROLLBACK or NOT (unknown)")
        service = self.broker.transactions
        if service is None:
            raise RequestError(common_pb2.SERVICE_NOT_AVAILABLE,
                               "transactions are ended on the master, this broker is a slave")
        return M.EndTransactionResponse(status=await service.end_transaction(
            request.producer_group, request.message_id, request.commit_log_offset,
            request.tran_state_table_offset, state, request.from_transaction_check))

    async def SubscribeTransactionCheck(
            self, request: M.SubscribeTransactionCheckRequest,
            context: Context) -> AsyncIterator[M.CheckTransactionStateRequest]:
        group, client_id = request.producer_group, request.client_id
        if not group or not client_id:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                "producer_group and client_id are required")
        streams = self.broker.check_streams
        clients = self.broker.clients
        clients.heartbeat(client_id, group, "", {})
        checks = streams.subscribe(group, client_id)
        closed = self.broker.pull_hold.closed_event
        waits: list[asyncio.Future[Any]] = []
        try:
            while not closed.is_set():
                next_check = asyncio.ensure_future(checks.get())
                waits = [next_check, asyncio.ensure_future(closed.wait())]
                await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
                if not next_check.done():
                    break  # the broker is shutting down
                yield next_check.result()
        finally:
            for waiting in waits:
                waiting.cancel()
            if streams.unsubscribe(group, client_id, checks):
                clients.unregister(client_id, group, "")
