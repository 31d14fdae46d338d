"""HEART_BEAT (34), UNREGISTER_CLIENT (35), GET_CONSUMER_LIST_BY_GROUP (38) and the
broker's NOTIFY_CONSUMER_IDS_CHANGED (40), LOCK_BATCH_MQ / UNLOCK_BATCH_MQ (41, 42): the
broker's client table (ClientManager) and the queue locks of its gRPC face.

A connection's heartbeat makes it the client's channel: the group's membership changes are
sent to it (40, oneway), and when it closes, its clients leave their groups at once
(RocketMQ's channel-close event); a client silent for 120 s expires as any other.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from typing import TYPE_CHECKING, Any

from broker.clients import ClientManager, QueueLocks
from broker.constants import RETRY_GROUP_TOPIC_PREFIX
from broker.status import RequestError
from mqproto import common_pb2
from remoting import codes
from remoting.command import RemotingCommand
from remoting.connection import RemotingConnection

if TYPE_CHECKING:
    from broker.context import BrokerContext
    from broker.send import SendProcessor

log = logging.getLogger(__name__)
STATE = "remoting4x.clients"  # RemotingConnection.attributes key


def json_body(cmd: RemotingCommand) -> dict[str, Any]:
    try:
        obj = json.loads(cmd.body.decode("utf-8")) if cmd.body else {}
    except (UnicodeDecodeError, ValueError) as e:
        raise RequestError(common_pb2.INVALID_PARAMETER,
                           f"request code {cmd.code}: body is not JSON: {e}") from None
    if not isinstance(obj, dict):
        raise RequestError(common_pb2.INVALID_PARAMETER,
                           f"request code {cmd.code}: body is not a JSON object")
    return obj


def _text(value: Any, what: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, (str, int)) or isinstance(value, bool):
        raise RequestError(common_pb2.INVALID_PARAMETER, f"{what} is not a string")
    return str(value)


class ConnectionClients:
    """What one connection registered: producer groups and consumer watches by client."""

    def __init__(self) -> None:
        self.producers: set[tuple[str, str]] = set()  # (client id, group)
        self.watches: dict[tuple[str, str], asyncio.Task[None]] = {}  # (client, group)


def connection_clients(conn: RemotingConnection, clients: ClientManager) -> ConnectionClients:
    state = conn.attributes.get(STATE)
    if state is None:
        state = conn.attributes[STATE] = ConnectionClients()

        def closed(_: RemotingConnection) -> None:
            for task in state.watches.values():
                task.cancel()  # its end unregisters the consumer (ClientManager.unwatch)
            state.watches.clear()
            for client_id, group in state.producers:
                clients.unregister(client_id, group, "")
            state.producers.clear()
        conn.on_close.append(closed)
    assert isinstance(state, ConnectionClients)
    return state


class RemotingClients:
    def __init__(self, broker: BrokerContext, send: SendProcessor,
                 queue_locks: QueueLocks) -> None:
        self.broker = broker
        self.send = send
        self.queue_locks = queue_locks

    async def heartbeat(self, conn: RemotingConnection, cmd: RemotingCommand
                        ) -> RemotingCommand:
        data = json_body(cmd)
        client_id = _text(data.get("clientID"), "clientID")
        if not client_id:
            raise RequestError(common_pb2.INVALID_PARAMETER, "heartbeat without clientID")
        clients = self.broker.clients
        state = connection_clients(conn, clients)
        for producer in data.get("producerDataSet") or []:
            group = _text((producer or {}).get("groupName"), "producerDataSet.groupName")
            if group:
                clients.heartbeat(client_id, group, "", {})
                state.producers.add((client_id, group))
        for consumer in data.get("consumerDataSet") or []:
            if not isinstance(consumer, dict):
                raise RequestError(common_pb2.INVALID_PARAMETER, "consumerDataSet entry is "
                                   "not an object")
            group = _text(consumer.get("groupName"), "consumerDataSet.groupName")
            if not group:
                continue
            subscriptions: dict[str, str] = {}
            for sub in consumer.get("subscriptionDataSet") or []:
                if not isinstance(sub, dict):
                    continue
                topic = _text(sub.get("topic"), "subscriptionData.topic")
                expression = _text(sub.get("subString"), "subscriptionData.subString") or "*"
                kind = _text(sub.get("expressionType"), "expressionType") or "TAG"
                try:
                    self.broker.filters.check(kind, expression)
                except RequestError as e:
                    raise RequestError(e.code, f"subscription of {group} to {topic}: "
                                               f"{e.remark}") from None
                subscriptions[topic] = expression
            clients.heartbeat(client_id, "", group, subscriptions)
            if RETRY_GROUP_TOPIC_PREFIX + group in subscriptions:
                await self.send.ensure_retry_topic(group)
            key = (client_id, group)
            if key not in state.watches:
                state.watches[key] = asyncio.create_task(
                    self._notify_changes(conn, client_id, group))
        return cmd.response(codes.SUCCESS)

    @staticmethod
    def last_client_id(cmd: RemotingCommand) -> str:
        """The clientID of a heartbeat the client table took."""
        try:
            return str(json.loads(cmd.body).get("clientID") or "")
        except (ValueError, AttributeError):
            return ""

    async def _notify_changes(self, conn: RemotingConnection, client_id: str, group: str
                              ) -> None:
        """Sends NOTIFY_CONSUMER_IDS_CHANGED to the client at each change of its group."""
        clients = self.broker.clients
        changes = clients.watch(group, client_id)
        try:
            while True:
                await changes.get()
                while not changes.empty():  # several changes at once: one notice
                    changes.get_nowait()
                conn.send_oneway(RemotingCommand(code=codes.NOTIFY_CONSUMER_IDS_CHANGED,
                                                 ext_fields={"consumerGroup": group}))
        finally:
            clients.unwatch(group, client_id, changes)

    async def unregister(self, conn: RemotingConnection, cmd: RemotingCommand
                         ) -> RemotingCommand:
        client_id = cmd.ext_str("clientID")
        producer_group, consumer_group = (cmd.ext_str("producerGroup"),
                                          cmd.ext_str("consumerGroup"))
        if not client_id:
            raise RequestError(common_pb2.INVALID_PARAMETER, "clientID is required")
        state = connection_clients(conn, self.broker.clients)
        self.broker.clients.unregister(client_id, producer_group, consumer_group)
        state.producers.discard((client_id, producer_group))
        task = state.watches.pop((client_id, consumer_group), None)
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        return cmd.response(codes.SUCCESS)

    async def consumer_list(self, cmd: RemotingCommand) -> RemotingCommand:
        group = cmd.ext_str("consumerGroup")
        ids = self.broker.clients.consumer_ids(group)
        if not ids:
            return cmd.response(codes.SYSTEM_ERROR, f"no consumer for this group, {group}")
        return cmd.response(codes.SUCCESS, None,
                            body=json.dumps({"consumerIdList": ids}).encode())

    @staticmethod
    def _lock_body(cmd: RemotingCommand) -> tuple[str, str, dict[tuple[str, int], dict[str, Any]]]:
        data = json_body(cmd)
        group = _text(data.get("consumerGroup"), "consumerGroup")
        client_id = _text(data.get("clientId"), "clientId")
        queues: dict[tuple[str, int], dict[str, Any]] = {}
        for mq in data.get("mqSet") or []:
            if not isinstance(mq, dict):
                raise RequestError(common_pb2.INVALID_PARAMETER, "mqSet entry is not an object")
            topic = _text(mq.get("topic"), "mqSet.topic")
            try:
                queue_id = int(mq.get("queueId"))  # type: ignore[arg-type]
            except (TypeError, ValueError):
                raise RequestError(common_pb2.INVALID_PARAMETER,
                                   f"mqSet.queueId {mq.get('queueId')!r} is not a number"
                                   ) from None
            queues[(topic, queue_id)] = {"topic": topic,
                                         "brokerName": _text(mq.get("brokerName"),
                                                             "mqSet.brokerName"),
                                         "queueId": queue_id}
        if not group or not client_id:
            raise RequestError(common_pb2.INVALID_PARAMETER,
                               "consumerGroup and clientId are required")
        return group, client_id, queues

    async def lock_batch(self, cmd: RemotingCommand) -> RemotingCommand:
        """Always a well-formed body, empty set included: the C++ client retries a
        malformed answer in a tight loop."""
        group, client_id, queues = self._lock_body(cmd)
        locked = self.queue_locks.try_lock_batch(group, client_id, list(queues))
        return cmd.response(codes.SUCCESS, None, body=json.dumps(
            {"lockOKMQSet": [queues[k] for k in locked]}).encode())

    async def unlock_batch(self, cmd: RemotingCommand) -> RemotingCommand:
        group, client_id, queues = self._lock_body(cmd)
        self.queue_locks.unlock_batch(group, client_id, list(queues))
        return cmd.response(codes.SUCCESS)
