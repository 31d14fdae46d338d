"""Transactions through failures, with real processes: a producer killed before it ends its
transaction (the check reaches another member of its group), a broker SIGKILLed between the
half message and the end, and between the final message and the op record (exactly one
outcome, no duplicate delivery), halves replicated to a slave."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from typing import Any

import grpc
import pytest

from common.constants import RMQ_SYS_TRANS_HALF_TOPIC, RMQ_SYS_TRANS_OP_HALF_TOPIC
from mqclient import (
    ConsumeFromWhere,
    LocalTransactionState,
    Message,
    MessageExt,
    PushConsumer,
    TransactionProducer,
)
from mqproto import common_pb2, messaging_pb2, messaging_pb2_grpc
from tests.mqclient.conftest import Cluster
from tests.mqclient.test_transaction import Seen, pending
from tests.support.brokers import RPC_TIMEOUT_S
from tests.support.processes import REPO_ROOT, Process, child_env
from tests.support.waiting import wait_until

COMMIT = LocalTransactionState.COMMIT
UNKNOWN = LocalTransactionState.UNKNOWN
TIMEOUT_S = 30.0
# Checks count while no producer of the group is online (as in RocketMQ): with checks every
# 100 ms, the 15 of the default would roll a half back within 1.5 s of a restart, before a
# loaded machine's producer reconnected its check stream.
FAST_CHECKS = {"transactionTimeOut": 500, "transactionCheckInterval": 100,
               "transactionCheckMax": 300}
FAULT_ENV = "MQ_TRANSACTION_FAULT"


class Recorder:
    """A listener: execute answers `execute` (after `on_execute`), checks answer COMMIT."""

    def __init__(self, execute: LocalTransactionState = UNKNOWN,
                 on_execute: Any = None) -> None:
        self.execute = execute
        self.on_execute = on_execute
        self.lock = threading.Lock()
        self.checked: Counter[str] = Counter()

    def execute_local_transaction(self, msg: Message, arg: Any) -> LocalTransactionState:
        if self.on_execute is not None:
            self.on_execute()
        return self.execute

    def check_local_transaction(self, msg: MessageExt) -> LocalTransactionState:
        with self.lock:
            self.checked[" ".join(msg.keys)] += 1
        return COMMIT


def consume(cluster: Cluster, consumers: list[PushConsumer], topic: str) -> Seen:
    seen = Seen()
    c = PushConsumer("CG_TXN_F", cluster.namesrv_addr,
                     consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
                     rebalance_interval_s=1)
    c.subscribe(topic)
    c.register_listener_concurrently(seen)
    consumers.append(c)
    c.start()
    return seen


def exactly_once(seen: Seen, key: str) -> None:
    wait_until(lambda: seen.snapshot()[key] >= 1, timeout=TIMEOUT_S,
               message=f"{key} consumed")
    time.sleep(1.0)  # a duplicate would arrive now
    assert seen.snapshot()[key] == 1


def producer(cluster: Cluster, group: str, listener: Recorder) -> TransactionProducer:
    return TransactionProducer(group, cluster.namesrv_addr, listener,
                               check_stream_refresh_s=0.3, default_topic_queue_nums=2,
                               send_timeout_s=5).start()


def test_producer_killed_before_end_is_checked_through_another_member(
        cluster: Cluster, consumers: list[PushConsumer]) -> None:
    cluster.start_broker("broker-a", **FAST_CHECKS)
    survivor_listener = Recorder()
    survivor = producer(cluster, "PG_KILLED", survivor_listener)
    try:
        survivor.producer.send(Message("TopicKilled", b"route"))  # the topic exists
        child = subprocess.run(
            [sys.executable, "-m", "tests.mqclient.transaction_child", cluster.namesrv_addr,
             "PG_KILLED", "TopicKilled", "CHILD-KEY"],
            cwd=REPO_ROOT, env=child_env(), capture_output=True, text=True, timeout=60)
        assert child.returncode == -signal.SIGKILL, child.stderr
        assert "half stored" in child.stdout
        seen = consume(cluster, consumers, "TopicKilled")
        exactly_once(seen, "CHILD-KEY")
        with survivor_listener.lock:
            # Checked again if the answer took longer than the 100 ms check interval (a
            # loaded machine): checks are at least once, the delivery exactly once.
            assert survivor_listener.checked["CHILD-KEY"] >= 1
        assert pending(cluster, "PG_KILLED") == 0
    finally:
        survivor.shutdown()


def _restart(cluster: Cluster, process: Process, **props: object) -> Process:
    if process.process.poll() is None:
        process.stop(signal.SIGKILL)
    return cluster.start_broker("broker-a", **FAST_CHECKS, **props)


def test_broker_killed_between_half_and_end_commits_once(
        cluster: Cluster, consumers: list[PushConsumer]) -> None:
    broker = cluster.start_broker("broker-a", **FAST_CHECKS)
    listener = Recorder(COMMIT, on_execute=lambda: broker.stop(signal.SIGKILL))
    p = producer(cluster, "PG_HALF_KILL", listener)
    try:
        p.producer.send(Message("TopicHalfKill", b"route"))
        result = p.send(Message("TopicHalfKill", b"payload", keys="HALF-KILL"))
        assert result.local_transaction_state is COMMIT  # but the end found no broker
        assert broker.process.poll() == -signal.SIGKILL
        _restart(cluster, broker)
        seen = consume(cluster, consumers, "TopicHalfKill")
        exactly_once(seen, "HALF-KILL")
        with listener.lock:
            assert listener.checked["HALF-KILL"] >= 1  # at least once, as above
        assert pending(cluster, "PG_HALF_KILL") == 0
    finally:
        p.shutdown()


def test_broker_killed_between_final_message_and_op_record_delivers_once(
        cluster: Cluster, consumers: list[PushConsumer], monkeypatch: pytest.MonkeyPatch
        ) -> None:
    monkeypatch.setenv(FAULT_ENV, "after_final_put")
    broker = cluster.start_broker("broker-a", **FAST_CHECKS)
    monkeypatch.delenv(FAULT_ENV)
    listener = Recorder(COMMIT)
    p = producer(cluster, "PG_OP_KILL", listener)
    try:
        p.producer.send(Message("TopicOpKill", b"route"))
        result = p.send(Message("TopicOpKill", b"payload", keys="OP-KILL"))
        assert result.local_transaction_state is COMMIT
        assert broker.process.wait(timeout=10) == -signal.SIGKILL  # killed itself
        assert "after_final_put: killing this broker" in broker.log_text()
        restarted = _restart(cluster, broker)
        # The commit was stored: the check's COMMIT writes the op record only.
        wait_until(lambda: "writing the op record only" in restarted.log_text(),
                   timeout=TIMEOUT_S, message="the op record written after the restart")
        assert pending(cluster, "PG_OP_KILL") == 0
        seen = consume(cluster, consumers, "TopicOpKill")
        exactly_once(seen, "OP-KILL")
    finally:
        p.shutdown()


def test_halves_and_their_outcome_are_replicated_to_the_slave(cluster: Cluster) -> None:
    fast_sync = {"slaveSynchronizeInterval": 300}
    cluster.start_broker("broker-a", **FAST_CHECKS, **fast_sync)
    slave = cluster.start_broker("broker-a", 1, **FAST_CHECKS, **fast_sync)
    listener = Recorder(UNKNOWN)
    p = producer(cluster, "PG_REPL", listener)
    channel = grpc.insecure_channel(slave.address)
    stub = messaging_pb2_grpc.MessagingServiceStub(channel)
    try:
        result = p.send(Message("TopicRepl", b"replicated", keys="REPL"))
        assert result.local_transaction_state is UNKNOWN

        def half_on_slave() -> messaging_pb2.Message | None:
            r = stub.QueryMessageById(messaging_pb2.QueryMessageByIdRequest(
                offset_msg_id=result.send_result.offset_msg_id), timeout=RPC_TIMEOUT_S)
            return r.message if r.status.code == common_pb2.SUCCESS else None

        half = wait_until(half_on_slave, timeout=TIMEOUT_S, message="the half on the slave")
        assert half.topic == RMQ_SYS_TRANS_HALF_TOPIC
        assert half.system_properties.real_topic == "TopicRepl"
        assert half.system_properties.producer_group == "PG_REPL"
        # The check commits it; the op record and the message reach the slave too.

        def max_offset(topic: str, queue_id: int) -> int:
            r = stub.GetMaxOffset(messaging_pb2.GetMaxOffsetRequest(topic=topic,
                                                                    queue_id=queue_id),
                                  timeout=RPC_TIMEOUT_S)
            return r.offset if r.status.code == common_pb2.SUCCESS else -1

        wait_until(lambda: max_offset(RMQ_SYS_TRANS_OP_HALF_TOPIC, 0) >= 1, timeout=TIMEOUT_S,
                   message="the op record on the slave")
        queue = result.send_result.message_queue.queue_id
        wait_until(lambda: max_offset("TopicRepl", queue) >= 1, timeout=TIMEOUT_S,
                   message="the committed message on the slave")
        # The slave does not end transactions.
        r = stub.EndTransaction(messaging_pb2.EndTransactionRequest(
            producer_group="PG_REPL", commit_log_offset=int(
                result.send_result.offset_msg_id[-16:], 16),
            commit_or_rollback=messaging_pb2.TRANSACTION_COMMIT_TYPE), timeout=RPC_TIMEOUT_S)
        assert r.status.code == common_pb2.SERVICE_NOT_AVAILABLE
    finally:
        channel.close()
        p.shutdown()
