"""Transactional messages at the broker (broker/transaction): half messages, EndTransaction,
op records and the check stream, over gRPC against an in-process broker."""

from __future__ import annotations

from typing import Any

from broker.transaction.messages import CID_RMQ_SYS_TRANS
from mqproto import common_pb2, messaging_pb2
from store.constants import RMQ_SYS_TRANS_HALF_TOPIC, RMQ_SYS_TRANS_OP_HALF_TOPIC
from tests.broker.conftest import RPC_TIMEOUT_S, BrokerThread, pull_everything, wait_until

M = messaging_pb2
GROUP = "PG_TXN"
TOPIC = "TopicTxn"
FAST = {"transactionTimeOut": 300, "transactionCheckInterval": 200, "transactionCheckMax": 3}


def half(body: bytes, tag: str = "TagA", **sp: Any) -> M.Message:
    return M.Message(topic=TOPIC, body=body, tag=tag, system_properties=M.SystemProperties(
        transaction_type=M.TRANSACTION_PREPARED_TYPE, **sp))


def send_half(b: BrokerThread, msg: M.Message) -> M.SendResultEntry:
    r = b.messaging.SendMessage(M.SendMessageRequest(producer_group=GROUP, message=msg,
                                                     queue_id=0, default_topic_queue_nums=1),
                                timeout=RPC_TIMEOUT_S)
    assert r.status.code == common_pb2.SUCCESS, r.status
    return r.result


def end(b: BrokerThread, result: M.SendResultEntry, state: int, *,
        from_check: bool = False) -> common_pb2.Status:
    return b.messaging.EndTransaction(M.EndTransactionRequest(
        producer_group=GROUP, message_id=result.message_id,
        transaction_id=result.transaction_id, commit_log_offset=result.commit_log_offset,
        tran_state_table_offset=result.queue_offset, commit_or_rollback=state,
        from_transaction_check=from_check), timeout=RPC_TIMEOUT_S).status


def real_messages(b: BrokerThread) -> list[Any]:
    if b.controller.topics.get(TOPIC) is None:
        return []
    return pull_everything(b.messaging, TOPIC, 0)


def test_half_is_invisible_commit_puts_it_rollback_does_not(start_broker: Any) -> None:
    b = start_broker()
    committed = send_half(b, half(b"one"))
    rolled = send_half(b, half(b"two", tag="TagB"))
    assert committed.transaction_id == committed.message_id != ""
    assert real_messages(b) == []  # in the half queue only
    assert len(pull_everything(b.messaging, RMQ_SYS_TRANS_HALF_TOPIC, 0)) == 2

    assert end(b, committed, M.TRANSACTION_COMMIT_TYPE).code == common_pb2.SUCCESS
    assert end(b, rolled, M.TRANSACTION_ROLLBACK_TYPE).code == common_pb2.SUCCESS
    [msg] = wait_until(lambda: real_messages(b), message="the committed message")
    assert msg.body == b"one" and msg.tag == "TagA"
    assert msg.system_properties.message_id == committed.message_id  # msgId kept
    assert msg.system_properties.transaction_type == M.TRANSACTION_COMMIT_TYPE
    assert msg.system_properties.producer_group == GROUP
    assert msg.system_properties.prepared_transaction_offset == committed.commit_log_offset
    ops = wait_until(lambda: pull_everything(b.messaging, RMQ_SYS_TRANS_OP_HALF_TOPIC, 0),
                     message="op records")
    assert sorted(int(o.body) for o in ops) == sorted([committed.queue_offset,
                                                       rolled.queue_offset])
    assert all(o.tag == "d" for o in ops)
    # A second end of either changes nothing.
    assert end(b, committed, M.TRANSACTION_COMMIT_TYPE).code == common_pb2.SUCCESS
    assert end(b, rolled, M.TRANSACTION_COMMIT_TYPE).code == common_pb2.SUCCESS
    assert len(real_messages(b)) == 1
    # The check service's progress moved past both.
    offsets = b.controller.offsets
    wait_until(lambda: offsets.query_offset(CID_RMQ_SYS_TRANS, RMQ_SYS_TRANS_HALF_TOPIC, 0) == 2,
               message="half offset 2")
