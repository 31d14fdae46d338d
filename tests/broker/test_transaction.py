"""Transactional messages at the broker (broker/transaction): half messages, EndTransaction,
op records and the check stream, over gRPC against an in-process broker."""

from __future__ import annotations

from typing import Any

from broker.transaction.messages import CID_RMQ_SYS_TRANS
from common.constants import RMQ_SYS_TRANS_HALF_TOPIC, RMQ_SYS_TRANS_OP_HALF_TOPIC
from mqproto import common_pb2, messaging_pb2
from tests.support.brokers import RPC_TIMEOUT_S, BrokerThread, pull_everything
from tests.support.waiting import wait_until

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
    wait_until(lambda: len(pull_everything(b.messaging, RMQ_SYS_TRANS_HALF_TOPIC, 0)) == 2,
               message="both halves in the half queue")  # dispatched a little later

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


def send_raw(b: BrokerThread, request: Any, batch: bool = False) -> Any:
    call = b.messaging.SendBatch if batch else b.messaging.SendMessage
    return call(request, timeout=RPC_TIMEOUT_S)


def test_delayed_batched_or_groupless_halves_are_refused_and_nothing_is_stored(
        start_broker: Any) -> None:
    b = start_broker()
    before = b.controller.store.max_phy_offset
    delayed = send_raw(b, M.SendMessageRequest(producer_group=GROUP, message=half(
        b"x", delay_time_level=3), queue_id=0))
    assert delayed.status.code == common_pb2.MESSAGE_ILLEGAL
    assert "cannot be delayed" in delayed.status.remark
    batch = send_raw(b, M.SendBatchRequest(producer_group=GROUP, topic=TOPIC, queue_id=0,
                                           messages=[half(b"x"), half(b"y")]), batch=True)
    assert batch.status.code == common_pb2.MESSAGE_ILLEGAL
    assert "cannot be batched" in batch.status.remark
    groupless = send_raw(b, M.SendMessageRequest(message=half(b"x"), queue_id=0))
    assert groupless.status.code == common_pb2.MESSAGE_ILLEGAL
    bad_group = send_raw(b, M.SendMessageRequest(producer_group="PG\x02", message=half(b"x"),
                                                 queue_id=0))
    assert bad_group.status.code == common_pb2.MESSAGE_ILLEGAL
    bad_immunity = send_raw(b, M.SendMessageRequest(producer_group=GROUP, message=half(
        b"x", reserved_properties={"CHECK_IMMUNITY_TIME_IN_SECONDS": "-1"}), queue_id=0))
    assert bad_immunity.status.code == common_pb2.MESSAGE_ILLEGAL
    # A client cannot send to the system topics either.
    to_half_topic = send_raw(b, M.SendMessageRequest(producer_group=GROUP, message=M.Message(
        topic=RMQ_SYS_TRANS_HALF_TOPIC, body=b"x"), queue_id=0))
    assert to_half_topic.status.code == common_pb2.MESSAGE_ILLEGAL
    assert b.controller.store.max_phy_offset == before


def test_end_transaction_names_the_half_it_ends(start_broker: Any) -> None:
    b = start_broker()
    result = send_half(b, half(b"one"))

    def ending(**fields: Any) -> common_pb2.Status:
        request = M.EndTransactionRequest(
            producer_group=GROUP, message_id=result.message_id,
            commit_log_offset=result.commit_log_offset, tran_state_table_offset=0,
            commit_or_rollback=M.TRANSACTION_COMMIT_TYPE)
        for name, value in fields.items():
            setattr(request, name, value)
        return b.messaging.EndTransaction(request, timeout=RPC_TIMEOUT_S).status

    assert ending(producer_group="OTHER").code == common_pb2.TRANSACTION_FAILED
    assert ending(message_id="NOT-IT").code == common_pb2.TRANSACTION_FAILED
    assert ending(commit_log_offset=result.commit_log_offset + 1).code == (
        common_pb2.TRANSACTION_FAILED)
    assert ending(commit_or_rollback=7).code == common_pb2.INVALID_PARAMETER
    # UNKNOWN keeps it pending; COMMIT then ends it.
    assert ending(commit_or_rollback=M.TRANSACTION_NOT_TYPE).code == common_pb2.SUCCESS
    assert real_messages(b) == []
    assert ending().code == common_pb2.SUCCESS
    assert len(wait_until(lambda: real_messages(b), message="committed")) == 1


def test_progress_survives_a_restart(start_broker: Any) -> None:
    b = start_broker(transactionCheckInterval=3_600_000)
    committed, rolled, open_one = (send_half(b, half(b"%d" % i)) for i in range(3))
    assert end(b, committed, M.TRANSACTION_COMMIT_TYPE).code == common_pb2.SUCCESS
    assert end(b, rolled, M.TRANSACTION_ROLLBACK_TYPE).code == common_pb2.SUCCESS
    b.stop()
    stored = (b.controller.root / "config" / "consumerOffset.json").read_text()
    assert f"{RMQ_SYS_TRANS_HALF_TOPIC}@{CID_RMQ_SYS_TRANS}" in stored

    again = start_broker(transactionCheckInterval=3_600_000)
    service = again.controller.transactions
    wait_until(lambda: service.ready.is_set(), message="transactions loaded")
    summary = again.call(lambda: service.summary())
    assert summary.half_offset == open_one.queue_offset == 2  # rescanned from the open one
    assert [(g.producer_group, g.pending) for g in summary.groups] == [(GROUP, 1)]
    assert end(again, committed, M.TRANSACTION_COMMIT_TYPE).code == common_pb2.SUCCESS
    assert end(again, open_one, M.TRANSACTION_COMMIT_TYPE).code == common_pb2.SUCCESS
    bodies = [m.body for m in wait_until(lambda: len(real_messages(again)) >= 2 and
                                         real_messages(again), message="two committed")]
    assert bodies == [b"0", b"2"]
    assert again.call(lambda: service.summary()).groups == []  # nothing pending, no producer


def test_a_late_producer_end_after_the_check_changes_nothing(start_broker: Any) -> None:
    b = start_broker(**FAST)
    stream = b.messaging.SubscribeTransactionCheck(M.SubscribeTransactionCheckRequest(
        producer_group=GROUP, client_id="p1"))
    try:
        result = send_half(b, half(b"late"))
        check = next(iter(stream))  # after transactionTimeOut, on the next run
        sp = check.message.system_properties
        assert (check.message.topic, sp.message_id) == (TOPIC, result.message_id)
        assert check.commit_log_offset != result.commit_log_offset  # a renewed copy
        answer = b.messaging.EndTransaction(M.EndTransactionRequest(
            producer_group=GROUP, message_id=sp.message_id,
            commit_log_offset=check.commit_log_offset,
            tran_state_table_offset=check.tran_state_table_offset,
            commit_or_rollback=M.TRANSACTION_COMMIT_TYPE, from_transaction_check=True),
            timeout=RPC_TIMEOUT_S)
        assert answer.status.code == common_pb2.SUCCESS
        # The producer's own end arrives late, naming the first copy, and says ROLLBACK,
        # then COMMIT: the transaction has its outcome already.
        late = end(b, result, M.TRANSACTION_ROLLBACK_TYPE)
        assert late.code == common_pb2.SUCCESS and "already ended" in late.remark
        assert "already ended" in end(b, result, M.TRANSACTION_COMMIT_TYPE).remark
        [msg] = wait_until(lambda: real_messages(b), message="the committed message")
        assert msg.body == b"late"
        assert len(real_messages(b)) == 1
    finally:
        stream.cancel()
