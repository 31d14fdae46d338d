"""The broker's remoting port: RocketMQ 4.x request codes dispatched to this package's
processors. A refused request is answered with RocketMQ's response code and the reason
in `remark`; an unknown code with REQUEST_CODE_NOT_SUPPORTED (3), the connection kept.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from acl.grpc_auth import ServerAuth
from broker.clients import QueueLocks
from broker.remoting4x.acl import RemotingAcl
from broker.remoting4x.admin import RemotingAdmin
from broker.remoting4x.clients import RemotingClients
from broker.remoting4x.consuming import RemotingConsume
from broker.remoting4x.sending import RemotingSend
from broker.remoting4x.status import response_code
from broker.remoting4x.transactions import RemotingTransactions
from broker.status import RequestError
from remoting import codes
from remoting.command import DEFAULT_MAX_FRAME_BYTES, RemotingCommand
from remoting.connection import RemotingConnection, RemotingLimits, RemotingServer

if TYPE_CHECKING:
    from broker.context import BrokerContext
    from broker.pull import PullProcessor
    from broker.send import SendProcessor

log = logging.getLogger(__name__)
Handler = Callable[[RemotingConnection, RemotingCommand], Awaitable[RemotingCommand | None]]


def peer_host(conn: RemotingConnection) -> tuple[str, int]:
    host, _, port = conn.peer.rpartition(":")
    return (host or "127.0.0.1", int(port) if port.isdigit() else 0)


class BrokerRemoting:
    """Serves 4.x clients for one broker, on its context and processors."""

    def __init__(self, broker: BrokerContext, send: SendProcessor, pull: PullProcessor,
                 queue_locks: QueueLocks, auth: ServerAuth | None = None) -> None:
        self.broker = broker
        # aclEnable: every request is signed and checked (acl.py)
        self.acl = RemotingAcl(auth) if auth is not None else None
        self.sending = RemotingSend(broker, send)
        self.consume = RemotingConsume(broker, pull, send, queue_locks)
        self.clients = RemotingClients(broker, send, queue_locks)
        self.transactions = RemotingTransactions(broker)
        self.admin = a = RemotingAdmin(broker)
        c = self.consume
        by_request: dict[int, Callable[[RemotingCommand], Awaitable[RemotingCommand]]] = {
            codes.PULL_MESSAGE: c.pull,
            codes.QUERY_CONSUMER_OFFSET: c.query_consumer_offset,
            codes.UPDATE_CONSUMER_OFFSET: c.update_consumer_offset,
            codes.GET_MAX_OFFSET: c.max_offset,
            codes.GET_MIN_OFFSET: c.min_offset,
            codes.SEARCH_OFFSET_BY_TIMESTAMP: c.search_offset,
            codes.GET_EARLIEST_MSG_STORETIME: c.earliest_msg_store_time,
            codes.CONSUMER_SEND_MSG_BACK: c.send_back,
            codes.GET_CONSUMER_LIST_BY_GROUP: self.clients.consumer_list,
            codes.LOCK_BATCH_MQ: self.clients.lock_batch,
            codes.UNLOCK_BATCH_MQ: self.clients.unlock_batch,
            codes.END_TRANSACTION: self.transactions.end_transaction,
            codes.QUERY_MESSAGE: a.query_message,
            codes.VIEW_MESSAGE_BY_ID: a.view_message,
            codes.GET_BROKER_RUNTIME_INFO: a.runtime_info,
            codes.GET_TOPIC_STATS_INFO: a.topic_stats,
            codes.GET_CONSUME_STATS: a.consume_stats,
            codes.GET_CONSUMER_CONNECTION_LIST: a.consumer_connections,
            codes.GET_CONSUMER_RUNNING_INFO: a.consumer_running_info,
        }
        self.handlers: dict[int, Handler] = {
            code: (lambda _conn, cmd, f=f: f(cmd)) for code, f in by_request.items()}
        for code in (codes.SEND_MESSAGE, codes.SEND_MESSAGE_V2, codes.SEND_BATCH_MESSAGE):
            self.handlers[code] = self._send
        self.handlers[codes.HEART_BEAT] = self._heartbeat
        self.handlers[codes.UNREGISTER_CLIENT] = self.clients.unregister
        c_ = broker.config
        max_frame = max(DEFAULT_MAX_FRAME_BYTES, 2 * broker.store_config.max_message_size
                        + (1 << 20))
        self.server = RemotingServer(self.handle, RemotingLimits(
            max_frame_bytes=max_frame,
            frame_timeout_s=c_.send_channel_frame_timeout_mills / 1000,
            idle_timeout_s=c_.send_channel_idle_timeout_mills / 1000,
            max_connections=c_.send_channel_max_connections))
        self.addr = ""

    async def _send(self, conn: RemotingConnection, cmd: RemotingCommand) -> RemotingCommand:
        return await self.sending(cmd, peer_host(conn))

    async def _heartbeat(self, conn: RemotingConnection, cmd: RemotingCommand
                         ) -> RemotingCommand:
        answer = await self.clients.heartbeat(conn, cmd)
        self.transactions.heartbeat(conn, cmd)
        client_id = self.clients.last_client_id(cmd)
        if client_id:
            self.admin.heartbeat(client_id, conn, cmd.language, cmd.version)
        return answer

    async def handle(self, conn: RemotingConnection, cmd: RemotingCommand
                     ) -> RemotingCommand | None:
        handler = self.handlers.get(cmd.code)
        if handler is None:
            return cmd.response(codes.REQUEST_CODE_NOT_SUPPORTED,
                                f"request code {cmd.code} is not supported by this broker")
        try:
            if self.acl is not None:
                self.acl.check(cmd, peer_host(conn)[0])
            return await handler(conn, cmd)
        except RequestError as e:
            return cmd.response(response_code(e.code), e.remark)

    async def start(self, host: str, port: int) -> int:
        return await self.server.start(host, port)

    async def stop(self) -> None:
        await self.server.stop()
