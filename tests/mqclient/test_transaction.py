"""Transactional messages end to end (mqclient.TransactionProducer against real name server
and broker processes): the seed's example, checks reaching another member of the group, and
what a consumer sees."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections import Counter
from typing import Any

import pytest

from mqclient import (
    ConsumeFromWhere,
    ConsumeStatus,
    LocalTransactionState,
    Message,
    MessageExt,
    MQClientError,
    PushConsumer,
    TransactionProducer,
)
from mqclient.admin import MQAdmin
from tests.mqclient.conftest import Cluster
from tests.support.waiting import wait_until

COMMIT = LocalTransactionState.COMMIT
ROLLBACK = LocalTransactionState.ROLLBACK
UNKNOWN = LocalTransactionState.UNKNOWN
TIMEOUT_S = 30.0
# Checks every 100 ms of halves older than 500 ms: the seed's 15 checks take about 2 s.
FAST_CHECKS = {"transactionTimeOut": 500, "transactionCheckInterval": 100}


class SeedListener:
    """The seed's TransactionListenerImpl (004 §4.7.1): TagA commits, TagB rolls back, the
    rest are UNKNOWN; checked, TagC commits, TagD rolls back, TagE stays UNKNOWN."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.checks: Counter[str] = Counter()  # by key

    def execute_local_transaction(self, msg: Message, arg: Any) -> LocalTransactionState:
        if "TagA" in msg.tags:
            return COMMIT
        if "TagB" in msg.tags:
            return ROLLBACK
        return UNKNOWN

    def check_local_transaction(self, msg: MessageExt) -> LocalTransactionState:
        with self.lock:
            self.checks[" ".join(msg.keys)] += 1
        if "TagC" in msg.tags:
            return COMMIT
        if "TagD" in msg.tags:
            return ROLLBACK
        return UNKNOWN


class Seen:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.keys: Counter[str] = Counter()

    def __call__(self, msgs: list[MessageExt]) -> ConsumeStatus:
        with self.lock:
            self.keys.update(" ".join(m.keys) for m in msgs)
        return ConsumeStatus.CONSUME_SUCCESS

    def snapshot(self) -> Counter[str]:
        with self.lock:
            return Counter(self.keys)


def pending(cluster: Cluster, group: str) -> int:
    with MQAdmin(cluster.namesrv_addr) as admin:
        return sum(p.pending for r in admin.pending_transactions_of_cluster(None, group)
                   if isinstance(r, list) for p in r)


def start_consumer(cluster: Cluster, consumers: list[PushConsumer], topic: str,
                   seen: Seen) -> None:
    c = PushConsumer("CG_TXN", cluster.namesrv_addr,
                     consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
    c.subscribe(topic)
    c.register_listener_concurrently(seen)
    consumers.append(c)
    c.start()


def test_seed_example_consumer_sees_taga_and_tagc_only(
        cluster: Cluster, consumers: list[PushConsumer]) -> None:
    cluster.start_broker("broker-a", **FAST_CHECKS)
    listener = SeedListener()
    producer = TransactionProducer("please_rename_unique_group_name", cluster.namesrv_addr,
                                   listener, default_topic_queue_nums=4).start()
    seen = Seen()
    try:
        tags = ["TagA", "TagB", "TagC", "TagD", "TagE"]
        states = {}
        for i in range(10):
            msg = Message("TopicTest", b"Hello RocketMQ %d" % i, tags=tags[i % 5],
                          keys=f"KEY{i}")
            result = producer.send(msg, None)
            assert result.status.value == "SEND_OK"
            assert result.transaction_id == result.msg_id
            states[f"KEY{i}"] = result.local_transaction_state
        assert states == {f"KEY{i}": [COMMIT, ROLLBACK, UNKNOWN, UNKNOWN, UNKNOWN][i % 5]
                          for i in range(10)}
        start_consumer(cluster, consumers, "TopicTest", seen)
        # TagE is asked transactionCheckMax (15) times, then rolled back.
        wait_until(lambda: pending(cluster, "please_rename_unique_group_name") == 0,
                   timeout=TIMEOUT_S, message="every half settled")
        wait_until(lambda: set(seen.snapshot()) == {"KEY0", "KEY5", "KEY2", "KEY7"},
                   timeout=TIMEOUT_S, message="the committed messages consumed")
        time.sleep(0.5)  # a duplicate or a late commit would arrive now
    finally:
        producer.shutdown()
    assert seen.snapshot() == Counter({"KEY0": 1, "KEY5": 1, "KEY2": 1, "KEY7": 1})
    with listener.lock:
        checks = dict(listener.checks)
    assert checks["KEY2"] == checks["KEY7"] == checks["KEY3"] == checks["KEY8"] == 1
    assert checks["KEY4"] == checks["KEY9"] == 15  # UNKNOWN 15 times, then rolled back
    assert "KEY0" not in checks and "KEY1" not in checks


def test_transactional_message_cannot_be_delayed_or_batched(cluster: Cluster) -> None:
    cluster.start_broker("broker-a")
    producer = TransactionProducer("PG_RULES", cluster.namesrv_addr, SeedListener()).start()
    try:
        with pytest.raises(MQClientError, match="cannot be delayed"):
            producer.send(Message("TopicRules", b"x", delay_level=2))
        with pytest.raises(MQClientError, match="cannot be batched"):
            producer.send([Message("TopicRules", b"x")])  # type: ignore[arg-type]
        with pytest.raises(MQClientError, match="CHECK_IMMUNITY_TIME_IN_SECONDS"):
            producer.send(Message("TopicRules", b"x",
                                  properties={"CHECK_IMMUNITY_TIME_IN_SECONDS": "soon"}))
    finally:
        producer.shutdown()
    assert pending(cluster, "PG_RULES") == 0


def test_mqadmin_shows_halves_pending_per_producer_group(cluster: Cluster) -> None:
    cluster.start_broker("broker-a", transactionCheckInterval=3_600_000)
    producer = TransactionProducer("PG_ADMIN", cluster.namesrv_addr, SeedListener()).start()
    try:
        # One commits, then two stay UNKNOWN: they count at once, with no check or end
        # since them (the check interval is an hour).
        for tag in ("TagA", "TagC", "TagD"):
            producer.send(Message("TopicAdmin", b"x", tags=tag))
        run = subprocess.run(
            [sys.executable, "-m", "mqclient.cli.mqadmin", "transactionStatus", "-n",
             cluster.namesrv_addr, "--json"], capture_output=True, text=True, timeout=60)
        assert run.returncode == 0, run.stderr
        [row] = json.loads(run.stdout)
        assert (row["broker_name"], row["producer_group"], row["pending"],
                row["online_producers"], row["max_check_times"]) == ("broker-a", "PG_ADMIN",
                                                                     2, 1, 0)
        table = subprocess.run(
            [sys.executable, "-m", "mqclient.cli.mqadmin", "transactionStatus", "-n",
             cluster.namesrv_addr, "-g", "PG_ADMIN"], capture_output=True, text=True,
            timeout=60)
        assert "PG_ADMIN" in table.stdout and "2 half message(s) without an outcome" in (
            table.stdout)
    finally:
        producer.shutdown()
