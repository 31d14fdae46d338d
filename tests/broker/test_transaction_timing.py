"""When the check service asks (broker/transaction/service.py), with the defaults
(transactionTimeOut 6 s, transactionCheckInterval 60 s, transactionCheckMax 15) on an
injected clock: an in-process broker whose check-interval sleeps advance a fake clock only
when the test allows a run."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import grpc

from common.constants import RMQ_SYS_TRANS_HALF_TOPIC
from mqproto import common_pb2, messaging_pb2
from tests.support.brokers import RPC_TIMEOUT_S, BrokerThread, broker_props
from tests.support.waiting import wait_until

M = messaging_pb2
GROUP = "PG_TIMING"
INTERVAL_S = 60.0  # the default transactionCheckInterval


class FakeTime:
    """clock_ms for the broker; its sleeps of one check interval wait for `allow(n)` and
    then move the clock by the interval (other sleeps are real)."""

    def __init__(self) -> None:
        self.now_ms = time.time_ns() // 1_000_000
        self.lock = threading.Lock()
        self.runs_allowed = 0
        self.runs = 0

    def clock_ms(self) -> int:
        with self.lock:
            return self.now_ms

    def allow(self, runs: int) -> None:
        with self.lock:
            self.runs_allowed += runs

    async def sleep(self, seconds: float) -> None:
        if seconds != INTERVAL_S:
            await asyncio.sleep(seconds)
            return
        while True:
            with self.lock:
                if self.runs_allowed > 0:
                    self.runs_allowed -= 1
                    self.runs += 1
                    self.now_ms += int(INTERVAL_S * 1000)
                    return
            await asyncio.sleep(0.002)


class CheckLog:
    """A producer's check stream that never answers: every half stays UNKNOWN."""

    def __init__(self, b: BrokerThread) -> None:
        self.lock = threading.Lock()
        self.checks: list[M.CheckTransactionStateRequest] = []
        self.call = b.messaging.SubscribeTransactionCheck(M.SubscribeTransactionCheckRequest(
            producer_group=GROUP, client_id="silent@1"))
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        try:
            for check in self.call:
                with self.lock:
                    self.checks.append(check)
        except grpc.RpcError:
            pass

    def times_of(self, body: bytes) -> list[int]:
        """Store times of the renewed copies each check named, by the half's body."""
        with self.lock:
            return [c.message.system_properties.store_timestamp for c in self.checks
                    if c.message.body == body]

    def close(self) -> None:
        self.call.cancel()
        self.thread.join(5)


def send_half(b: BrokerThread, body: bytes, **reserved: str) -> M.SendResultEntry:
    r = b.messaging.SendMessage(M.SendMessageRequest(
        producer_group=GROUP, queue_id=0, message=M.Message(
            topic="TopicTiming", body=body, system_properties=M.SystemProperties(
                transaction_type=M.TRANSACTION_PREPARED_TYPE,
                reserved_properties=reserved))), timeout=RPC_TIMEOUT_S)
    assert r.status.code == common_pb2.SUCCESS, r.status
    return r.result


def test_checks_every_interval_after_the_timeout_at_most_max_times(tmp_path: Any) -> None:
    fake = FakeTime()
    b = BrokerThread(broker_props(tmp_path / "store"), clock_ms=fake.clock_ms,
                     sleep=fake.sleep)
    checks = CheckLog(b)
    try:
        service = b.controller.transactions
        assert service is not None
        wait_until(lambda: b.controller.check_streams.members(GROUP) == ["silent@1"],
                   message="the check stream")
        born = fake.clock_ms()
        send_half(b, b"plain")
        send_half(b, b"immune", CHECK_IMMUNITY_TIME_IN_SECONDS="150")
        # The store dispatches to the half queue after the put is answered: the run allowed
        # next must find both halves there.
        wait_until(lambda: b.controller.store.get_max_offset_in_queue(
            RMQ_SYS_TRANS_HALF_TOPIC, 0) == 2, message="the halves in the half queue")
        # Younger than transactionTimeOut: not asked. Allow one run that starts 60 s on...
        fake.allow(1)
        wait_until(lambda: checks.times_of(b"plain"), message="the first check")
        assert checks.times_of(b"plain") == [born + 60_000]
        assert checks.times_of(b"immune") == []  # 60 s < 150 s of immunity
        # ... then 19 more: the plain half is asked at each run up to 15 times, then
        # rolled back at the 16th; the immune one from the run at 180 s on.
        fake.allow(19)
        wait_until(lambda: fake.runs == 20 and service.table.pending == {},
                   timeout=20, message="both rolled back")
        wait_until(lambda: len(checks.times_of(b"plain")) >= 15
                   and len(checks.times_of(b"immune")) >= 15, timeout=20,
                   message="every check read from the stream")
        assert checks.times_of(b"plain") == [born + 60_000 * k for k in range(1, 16)]
        assert checks.times_of(b"immune") == [born + 60_000 * k for k in range(3, 18)]
        assert [c.message.system_properties.reserved_properties["TRANSACTION_CHECK_TIMES"]
                for c in checks.checks if c.message.body == b"plain"] == [
            str(n) for n in range(1, 16)]
        assert {(c.message.topic, c.message.system_properties.transaction_type)
                for c in checks.checks} == {("TopicTiming", M.TRANSACTION_PREPARED_TYPE)}
        assert service.discarded == 2
        assert b.controller.topics.get("TopicTiming") is not None
        assert b.controller.store.get_max_offset_in_queue("TopicTiming", 0) == 0  # no commit
    finally:
        checks.close()
        b.stop()
