"""END_TRANSACTION (37) and the broker's CHECK_TRANSACTION_STATE (39) on the producer's
connection, through the broker's transaction service and its producers' check streams.

A producer's heartbeat on a connection subscribes it to its group's checks (as the gRPC
SubscribeTransactionCheck stream does); each check goes to that connection as a oneway
39 whose body is the half message's stored record, until the connection closes.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import TYPE_CHECKING

from broker.remoting4x.consuming import with_store_port
from broker.remoting4x.status import response_code
from broker.status import RequestError
from broker.transaction.checks import TRANSACTION_STATES
from common.codec import encode_offset_msg_id
from common.constants import MessageProperty
from mqproto import common_pb2, messaging_pb2
from remoting import codes
from remoting.command import RemotingCommand
from remoting.connection import RemotingConnection

if TYPE_CHECKING:
    from broker.context import BrokerContext

log = logging.getLogger(__name__)
STATE = "remoting4x.checks"

# MessageSysFlag transaction types as END_TRANSACTION's commitOrRollback carries them.
_COMMIT_OR_ROLLBACK = {8: messaging_pb2.TRANSACTION_COMMIT_TYPE,
                       12: messaging_pb2.TRANSACTION_ROLLBACK_TYPE,
                       0: messaging_pb2.TRANSACTION_NOT_TYPE}


class RemotingTransactions:
    def __init__(self, broker: BrokerContext) -> None:
        self.broker = broker

    async def end_transaction(self, cmd: RemotingCommand) -> RemotingCommand:
        group = cmd.ext_str("producerGroup")
        if not group:
            raise RequestError(common_pb2.INVALID_PARAMETER, "producerGroup is required")
        kind = _COMMIT_OR_ROLLBACK.get(cmd.ext_int("commitOrRollback"))
        if kind is None:
            raise RequestError(common_pb2.INVALID_PARAMETER,
                               "commitOrRollback must be 8 (commit), 12 (rollback) or 0")
        service = self.broker.transactions
        if service is None:
            raise RequestError(common_pb2.SERVICE_NOT_AVAILABLE,
                               "transactions are ended on the master, this broker is a slave")
        status = await service.end_transaction(
            group, cmd.ext_str("transactionId") or cmd.ext_str("msgId"),
            cmd.ext_int("commitLogOffset"), cmd.ext_int("tranStateTableOffset"),
            TRANSACTION_STATES[kind], cmd.ext_bool("fromTransactionCheck"))
        if status.code != common_pb2.SUCCESS:
            log.info("END_TRANSACTION of %s: %s", group, status.remark)
        return cmd.response(response_code(status.code), status.remark or None)

    def heartbeat(self, conn: RemotingConnection, cmd: RemotingCommand) -> None:
        """Subscribes the connection to its producers' groups' checks (once each)."""
        try:
            data = json.loads(cmd.body or b"{}")
        except ValueError:
            return  # refused by the client table already
        client_id = str(data.get("clientID") or "")
        tasks = conn.attributes.setdefault(STATE, {})
        assert isinstance(tasks, dict)
        for producer in data.get("producerDataSet") or []:
            group = str((producer or {}).get("groupName") or "")
            if not group or not client_id or (client_id, group) in tasks:
                continue
            if group == "CLIENT_INNER_PRODUCER":  # every 4.x client has it; never checked
                continue
            tasks[(client_id, group)] = asyncio.create_task(
                self._forward_checks(conn, client_id, group))
        if len(tasks) and not conn.attributes.get(STATE + ".close"):
            conn.attributes[STATE + ".close"] = True
            conn.on_close.append(lambda _c: [t.cancel() for t in tasks.values()])

    async def _forward_checks(self, conn: RemotingConnection, client_id: str, group: str
                              ) -> None:
        streams = self.broker.check_streams
        checks = streams.subscribe(group, client_id)
        try:
            while True:
                check = await checks.get()
                self._send_check(conn, check)
        finally:
            streams.unsubscribe(group, client_id, checks)

    def _send_check(self, conn: RemotingConnection,
                    check: messaging_pb2.CheckTransactionStateRequest) -> None:
        store = self.broker.store
        ext = store.look_message_by_offset(check.commit_log_offset)
        if ext is None:
            return
        _, _, port = self.broker.addresses.remoting_addr.rpartition(":")
        record = with_store_port(store.read_commitlog(check.commit_log_offset, ext.store_size),
                                 int(port) if port.isdigit() else 0)
        uniq = ext.properties.get(MessageProperty.UNIQ_KEY, "")
        conn.send_oneway(RemotingCommand(
            code=codes.CHECK_TRANSACTION_STATE, body=record, ext_fields={
                "tranStateTableOffset": check.tran_state_table_offset,
                "commitLogOffset": check.commit_log_offset,
                "msgId": uniq, "transactionId": uniq,
                "offsetMsgId": encode_offset_msg_id(self.broker.store_host,
                                                    check.commit_log_offset)}))
