"""Queries (QUERY_MESSAGE 12, VIEW_MESSAGE_BY_ID 33) and what RocketMQ's admin tools ask
(broker runtime info 28, topic stats 202, consumer connections 203, consume stats 208),
read from the store, offsets and client table the gRPC admin service reads; consumer
running info (307) is relayed to the client's own remoting connection and its answer
returned.

Answers are what Apache's broker writes with fastjson: maps keyed by a message queue use
the queue's JSON object as the key (`{{"brokerName":"b","queueId":0,"topic":"T"}:{...}}`),
which fastjson reads back; the rest is plain JSON. Message answers are the stored records.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from broker import consume_stats
from broker.admin import runtime_table
from broker.constants import DEFAULT_QUERY_MAX_NUM, MAX_QUERY_NUM
from broker.remoting4x.consuming import with_store_port
from broker.status import RequestError
from mqproto import common_pb2
from remoting import codes
from remoting.command import RemotingCommand
from remoting.connection import ConnectionClosed, RemotingConnection, RemotingTimeout

if TYPE_CHECKING:
    from broker.context import BrokerContext
    from common.codec import MessageExt

UNIQUE_KEY_QUERY = "_UNIQUE_KEY_QUERY"  # MixAll.UNIQUE_MSG_QUERY_FLAG
RELAY_TIMEOUT_S = 5.0  # a client's answer to a relayed request


def _dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"))


def queue_keyed(entries: list[tuple[dict[str, Any], dict[str, Any]]]) -> str:
    """A fastjson map keyed by MessageQueue objects."""
    return "{" + ",".join(f"{_dumps(mq)}:{_dumps(value)}" for mq, value in entries) + "}"


class RemotingAdmin:
    def __init__(self, broker: BrokerContext) -> None:
        self.broker = broker
        # client id -> (address, language, version), from remoting heartbeats
        self.connections: dict[str, tuple[str, str, int]] = {}
        self.channels: dict[str, RemotingConnection] = {}  # client id -> its connection

    def heartbeat(self, client_id: str, conn: RemotingConnection, language: str,
                  version: int) -> None:
        """The connection a client's last heartbeat came over (until it closes)."""
        self.connections[client_id] = (conn.peer, language, version)
        if self.channels.get(client_id) is not conn:
            self.channels[client_id] = conn

            def closed(_: RemotingConnection) -> None:
                if self.channels.get(client_id) is conn:
                    del self.channels[client_id]
                    self.connections.pop(client_id, None)
            conn.on_close.append(closed)

    async def consumer_running_info(self, cmd: RemotingCommand) -> RemotingCommand:
        """GET_CONSUMER_RUNNING_INFO relayed to the client (its answer, whatever it is)."""
        group, client_id = cmd.ext_str("consumerGroup"), cmd.ext_str("clientId")
        conn = self.channels.get(client_id)
        if conn is None or client_id not in self.broker.clients.consumer_ids(group):
            return cmd.response(codes.SYSTEM_ERROR, f"The Consumer <{group}> <{client_id}> "
                                "not online (or not connected over remoting)")
        relayed = RemotingCommand(code=cmd.code, ext_fields={
            "consumerGroup": group, "clientId": client_id,
            "jstackEnable": cmd.ext_str("jstackEnable", "false")})
        try:
            answer = await conn.request(relayed, RELAY_TIMEOUT_S)
        except (RemotingTimeout, ConnectionClosed) as e:
            return cmd.response(codes.SYSTEM_ERROR, f"consumer {client_id}: {e}")
        return cmd.response(answer.code, answer.remark, answer.ext_fields, answer.body)

    def _records(self, found: list[MessageExt]) -> bytes:
        store = self.broker.store
        _, _, port = self.broker.addresses.remoting_addr.rpartition(":")
        return with_store_port(b"".join(store.read_commitlog(m.commit_log_offset, m.store_size)
                                        for m in found), int(port) if port.isdigit() else 0)

    async def query_message(self, cmd: RemotingCommand) -> RemotingCommand:
        topic, key = cmd.ext_str("topic"), cmd.ext_str("key")
        if not topic or not key:
            raise RequestError(common_pb2.INVALID_PARAMETER, "topic and key are required")
        store = self.broker.store
        max_num = min(cmd.ext_int("maxNum", DEFAULT_QUERY_MAX_NUM) or DEFAULT_QUERY_MAX_NUM,
                      MAX_QUERY_NUM)
        found = store.query_message(topic, key, max_num, cmd.ext_int("beginTimestamp", 0),
                                    cmd.ext_int("endTimestamp", 0) or 2**62)
        if cmd.ext_bool(UNIQUE_KEY_QUERY):
            found = [m for m in found if m.uniq_key == key]
        index = store.index
        ext = {"indexLastUpdateTimestamp": index.last_timestamp_ms(),
               "indexLastUpdatePhyoffset": index.max_phy_offset()}
        if not found:
            return cmd.response(codes.QUERY_NOT_FOUND,
                                "can not find message, maybe time range not correct", ext)
        return cmd.response(codes.SUCCESS, None, ext, self._records(found))

    async def view_message(self, cmd: RemotingCommand) -> RemotingCommand:
        offset = cmd.ext_int("offset")
        ext = self.broker.store.look_message_by_offset(offset)
        if ext is None:
            return cmd.response(codes.SYSTEM_ERROR,
                                f"can not find message by the offset, {offset}")
        return cmd.response(codes.SUCCESS, None, body=self._records([ext]))

    async def runtime_info(self, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(codes.SUCCESS, None, body=_dumps(
            {"table": runtime_table(self.broker)}).encode())

    def _mq(self, topic: str, queue_id: int) -> dict[str, Any]:
        return {"brokerName": self.broker.config.broker_name, "queueId": queue_id,
                "topic": topic}

    async def topic_stats(self, cmd: RemotingCommand) -> RemotingCommand:
        topic = cmd.ext_str("topic")
        config = self.broker.topics.get(topic)
        if config is None:
            return cmd.response(codes.TOPIC_NOT_EXIST, f"topic[{topic}] not exist")
        store = self.broker.store
        entries = []
        for queue_id in range(config.write_queue_nums):
            max_offset = store.get_max_offset_in_queue(topic, queue_id)
            last = (store.get_message_store_timestamp(topic, queue_id, max_offset - 1)
                    if max_offset > 0 else 0)
            entries.append((self._mq(topic, queue_id), {
                "minOffset": store.get_min_offset_in_queue(topic, queue_id),
                "maxOffset": max_offset, "lastUpdateTimestamp": max(last, 0)}))
        return cmd.response(codes.SUCCESS, None,
                            body=('{"offsetTable":' + queue_keyed(entries) + "}").encode())

    async def consume_stats(self, cmd: RemotingCommand) -> RemotingCommand:
        broker = self.broker
        group, topic = cmd.ext_str("consumerGroup"), cmd.ext_str("topic")
        if not group:
            raise RequestError(common_pb2.INVALID_PARAMETER, "consumerGroup is required")
        [plan] = consume_stats.plan(broker, group, topic)
        entries = []
        for t in plan.topics:
            for q in t.queues():
                w = consume_stats.offset_wrapper(broker.store, broker.config.broker_name, q)
                entries.append((self._mq(q.topic, q.queue_id), {
                    "brokerOffset": w["broker_offset"],
                    "consumerOffset": max(w["consumer_offset"], 0),
                    "lastTimestamp": w["last_timestamp"]}))
        body = ('{"consumeTps":' + _dumps(plan.consume_tps) + ',"offsetTable":'
                + queue_keyed(entries) + "}")
        return cmd.response(codes.SUCCESS, None, body=body.encode())

    async def consumer_connections(self, cmd: RemotingCommand) -> RemotingCommand:
        broker = self.broker
        group = cmd.ext_str("consumerGroup")
        ids = broker.clients.consumer_ids(group)
        if not ids:
            return cmd.response(codes.CONSUMER_NOT_ONLINE,
                                f"the consumer group[{group}] not online")
        infos = broker.clients.consumer_groups.get(group, {})
        subscriptions: dict[str, dict[str, Any]] = {}
        for info in infos.values():
            for topic, expression in info.subscriptions.items():
                tags = [t.strip() for t in expression.split("||") if t.strip()]
                subscriptions[topic] = {"topic": topic, "subString": expression,
                                        "tagsSet": [] if expression == "*" else tags,
                                        "codeSet": [], "subVersion": 0,
                                        "expressionType": "TAG", "classFilterMode": False}
        connections = []
        for client_id in ids:
            addr, language, version = self.connections.get(client_id, ("", "OTHER", 0))
            connections.append({"clientId": client_id, "clientAddr": addr,
                                "language": language, "version": version})
        body = {"connectionSet": connections, "subscriptionTable": subscriptions,
                "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
                "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET"}
        return cmd.response(codes.SUCCESS, None, body=_dumps(body).encode())
