"""A slave's duties (SPEC §4, §5) with a master and a slave in this process: it copies the
master's topic configs, consumer and delay offsets, reports offsets committed on it so the
master keeps the larger one, and serves pulls only when allowed."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.consumer_offsets import ConsumerOffsetManager
from mqproto import admin_pb2, common_pb2, messaging_pb2
from tests.broker.test_offsets_admin import commit, query
from tests.support.brokers import BrokerThread, broker_props, code, create_topic, pull, send
from tests.support.waiting import wait_until

M = messaging_pb2
A = admin_pb2
C = common_pb2
TOPIC = "SyncTopic"
# The periodic round is far away: each test runs rounds itself with sync_now().
SLOW_SYNC = {"slaveSynchronizeInterval": 3_600_000}


class Pair:
    def __init__(self, tmp_path: Path, **slave_props: object) -> None:
        self.tmp_path = tmp_path
        self.master = BrokerThread(broker_props(tmp_path / "master", brokerRole="SYNC_MASTER"))
        self.slave: BrokerThread | None = None
        self.start_slave(**slave_props)

    def start_slave(self, **props: object) -> BrokerThread:
        slave = BrokerThread(broker_props(
            self.tmp_path / "slave", brokerRole="SLAVE", brokerId=1,
            haMasterAddress=self.master.controller.ha_server_addr, **{**SLOW_SYNC, **props}))
        self.slave = slave
        return slave

    def tell_master(self) -> None:
        """What a registration answer does: the slave learns its master's address (there is
        no name server here) and syncs at once."""
        controller = self.s.controller

        def tell() -> None:
            controller.master_addr = self.master.address
            assert controller.slave_sync is not None
            controller.slave_sync.wake()

        self.s.call(tell)

    @property
    def s(self) -> BrokerThread:
        assert self.slave is not None
        return self.slave

    def sync_now(self) -> bool:
        """One round now. The slave knows its master only during the round, so that no
        round runs by itself (the HA link coming up wakes the synchronizer)."""
        controller = self.s.controller
        sync = controller.slave_sync
        assert sync is not None

        async def round_() -> bool:
            controller.master_addr = self.master.address
            try:
                return await sync.sync_all()
            finally:
                controller.master_addr = ""

        return self.s.run(round_())

    def stop(self) -> None:
        if self.slave is not None:
            self.slave.stop()
        self.master.stop()


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[Pair]:
    p = Pair(tmp_path)
    try:
        yield p
    finally:
        p.stop()


def fill(pair: Pair, per_queue: int, queues: int = 2) -> None:
    """Messages on the master, replicated and dispatched on the slave."""
    for q in range(queues):
        for i in range(per_queue):
            assert code(send(pair.master, TOPIC, b"m%d" % i, queue_id=q)) == "SUCCESS"
    master_max = pair.master.controller.store.max_phy_offset
    wait_until(lambda: pair.s.controller.store.max_phy_offset == master_max, timeout=15,
               message="replication")
    wait_until(lambda: pair.s.controller.store.dispatch_behind_bytes == 0, message="dispatch")


def test_slave_copies_topic_configs_and_delay_offsets(pair: Pair) -> None:
    create_topic(pair.master, TOPIC, 2)
    pair.master.call(lambda: pair.master.controller.delay_offsets.offset_table.update(
        {1: 5, 3: 7}))
    assert pair.s.call(lambda: pair.s.controller.topics.get(TOPIC)) is None
    assert pair.sync_now()
    master_topics = pair.master.admin.GetTopicList(A.GetTopicListRequest())
    assert pair.s.admin.GetTopicList(A.GetTopicListRequest()) == master_topics
    assert dict(pair.s.admin.GetAllDelayOffset(A.GetAllDelayOffsetRequest()).offset_table) == {
        1: 5, 3: 7}
    saved = json.loads((pair.tmp_path / "slave" / "config" / "delayOffset.json").read_text())
    assert saved == {"offsetTable": {"1": 5, "3": 7}}
    saved_topics = json.loads((pair.tmp_path / "slave" / "config" / "topics.json").read_text())
    assert TOPIC in saved_topics["topicConfigTable"]

    # A deleted topic goes from the slave too (its data version changed).
    assert pair.master.admin.DeleteTopic(A.DeleteTopicRequest(topic=TOPIC)).status.code == (
        C.SUCCESS)
    assert pair.sync_now()
    assert pair.s.call(lambda: pair.s.controller.topics.get(TOPIC)) is None


def test_offsets_committed_on_the_slave_win_over_older_master_offsets(pair: Pair) -> None:
    create_topic(pair.master, TOPIC, 2)
    assert pair.sync_now()
    fill(pair, per_queue=10)
    # Consumers committed on the master; the slave copies.
    assert code(commit(pair.master, TOPIC, 0, 4)) == "SUCCESS"
    assert code(commit(pair.master, TOPIC, 1, 6)) == "SUCCESS"
    assert pair.sync_now()
    assert (query(pair.s, TOPIC, 0).offset, query(pair.s, TOPIC, 1).offset) == (4, 6)
    assert pair.s.call(lambda: pair.s.controller.offsets.local_commit_entries()) == []

    # The master "is gone": consumers commit on the slave. A copy of the master's older
    # offsets (the master came back) must not lower them.
    assert code(commit(pair.s, TOPIC, 0, 9)) == "SUCCESS"
    pair.master.call(lambda: pair.master.controller.offsets.commit_offset("CG", TOPIC, 1, 7))
    master_entries = pair.master.admin.GetAllConsumerOffset(A.GetAllConsumerOffsetRequest())
    pair.s.call(lambda: pair.s.controller.offsets.copy_from_master(
        (e.topic, e.consumer_group, e.queue_id, e.offset) for e in master_entries.offset_table))
    assert (query(pair.s, TOPIC, 0).offset, query(pair.s, TOPIC, 1).offset) == (9, 7)

    # A full round reports the slave's commit first: the master keeps the larger offset.
    assert pair.sync_now()
    assert (query(pair.master, TOPIC, 0).offset, query(pair.master, TOPIC, 1).offset) == (9, 7)
    assert pair.s.call(lambda: pair.s.controller.offsets.local_commit_entries()) == []

    # Taken by the master, the slave's offset is a plain copy again: a reset on the master
    # (to an older offset) reaches the slave.
    assert code(commit(pair.master, TOPIC, 0, 2)) == "SUCCESS"
    assert pair.sync_now()
    assert query(pair.s, TOPIC, 0).offset == 2


def test_unreported_slave_commits_survive_a_slave_restart(pair: Pair) -> None:
    create_topic(pair.master, TOPIC, 2)
    assert pair.sync_now()
    fill(pair, per_queue=5)
    master = pair.master
    assert code(commit(pair.s, TOPIC, 1, 5)) == "SUCCESS"
    pair.s.stop()
    assert json.loads((pair.tmp_path / "slave" / "config" / "consumerOffset.json").read_text())[
        "localCommitTable"] == {f"{TOPIC}@CG": {"1": 5}}
    assert code(query(master, TOPIC, 1)) == "QUERY_NOT_FOUND"
    # Restarted, the slave reports it as soon as its HA link to the master is up.
    slave = pair.start_slave()
    pair.tell_master()
    wait_until(lambda: query(master, TOPIC, 1).offset == 5, timeout=15,
               message="the slave's commit reported on connect")
    wait_until(lambda: not slave.call(lambda: slave.controller.offsets.local_commit_entries()),
               message="the reported commit forgotten")
    assert query(slave, TOPIC, 1).offset == 5


def test_merge_consumer_offset_keeps_the_larger_and_rejects_bad_entries(pair: Pair) -> None:
    create_topic(pair.master, TOPIC, 2)
    m = pair.master
    for q in range(2):  # offsets up to 3 exist (a larger one is taken as the queue's max)
        for i in range(3):
            assert code(send(m, TOPIC, b"m%d" % i, queue_id=q)) == "SUCCESS"
    assert code(commit(m, TOPIC, 0, 0)) == "SUCCESS"
    E = A.ConsumerOffsetEntry
    r = m.admin.MergeConsumerOffset(A.MergeConsumerOffsetRequest(offset_table=[
        E(topic=TOPIC, consumer_group="CG", queue_id=0, offset=3),
        E(topic=TOPIC, consumer_group="G2", queue_id=1, offset=1)]))
    assert r.status.code == C.SUCCESS and r.merged == 2
    r = m.admin.MergeConsumerOffset(A.MergeConsumerOffsetRequest(offset_table=[
        E(topic=TOPIC, consumer_group="CG", queue_id=0, offset=2)]))
    assert r.status.code == C.SUCCESS and r.merged == 0  # older: kept ours
    for bad in (E(topic="bad topic", consumer_group="CG", queue_id=0, offset=9),
                E(topic=TOPIC, consumer_group="", queue_id=0, offset=9),
                E(topic=TOPIC, consumer_group="CG", queue_id=0, offset=-1)):
        r = m.admin.MergeConsumerOffset(A.MergeConsumerOffsetRequest(offset_table=[
            E(topic=TOPIC, consumer_group="CG", queue_id=1, offset=9), bad]))
        assert r.status.code == C.INVALID_PARAMETER and "entry 1" in r.status.remark, r.status
    assert code(query(m, TOPIC, 1)) == "QUERY_NOT_FOUND"  # nothing of a bad request merged
    assert query(m, TOPIC, 0).offset == 3


def test_slave_serves_pulls_when_read_enabled_or_the_master_is_gone(pair: Pair) -> None:
    create_topic(pair.master, TOPIC, 2)
    assert pair.sync_now()
    fill(pair, per_queue=3)
    assert pair.s.call(lambda: pair.s.controller.master_available())
    refused = pull(pair.s, TOPIC, 0, 1)
    assert code(refused) == "NO_MATCHED_MSG" and not refused.messages
    assert refused.next_begin_offset == 1 and refused.suggest_which_broker_id == 0
    assert "pull from the master" in refused.status.remark

    pair.master.stop()  # the master is gone: the slave serves what it has
    wait_until(lambda: not pair.s.call(lambda: pair.s.controller.master_available()),
               message="the slave to see its master gone")
    served = pull(pair.s, TOPIC, 0, 1)
    assert code(served) == "SUCCESS" and [m.body for m in served.messages] == [b"m1", b"m2"]
    # ... and accepts offset commits, remembered as its own.
    assert code(commit(pair.s, TOPIC, 0, 3)) == "SUCCESS"
    assert pair.s.call(lambda: pair.s.controller.offsets.local_commit_entries()) == [
        (TOPIC, "CG", 0, 3)]
    assert not pair.sync_now()  # nobody to report to: kept for later
    assert pair.s.call(lambda: pair.s.controller.slave_sync.last_error)  # type: ignore[union-attr]


def test_slave_with_read_enabled_serves_pulls_while_the_master_lives(tmp_path: Path) -> None:
    p = Pair(tmp_path, slaveReadEnable=True)
    try:
        create_topic(p.master, TOPIC, 2)
        assert p.sync_now()
        fill(p, per_queue=2)
        assert p.s.call(lambda: p.s.controller.master_available())
        r = pull(p.s, TOPIC, 1, 0)
        assert code(r) == "SUCCESS" and len(r.messages) == 2
    finally:
        p.stop()


def test_a_master_drops_slave_side_commit_records_it_loads(tmp_path: Path) -> None:
    path = tmp_path / "consumerOffset.json"
    path.write_text(json.dumps({"offsetTable": {f"{TOPIC}@CG": {"0": 7}},
                                "localCommitTable": {f"{TOPIC}@CG": {"0": 7}}}))
    as_slave = ConsumerOffsetManager(path, lambda: 1, track_local_commits=True)
    assert as_slave.load() and as_slave.local_commit_entries() == [(TOPIC, "CG", 0, 7)]
    as_master = ConsumerOffsetManager(path, lambda: 1)
    assert as_master.load() and as_master.local_commit_entries() == []
    assert as_master.query_offset("CG", TOPIC, 0) == 7 and as_master.dirty
    as_master.persist()
    assert "localCommitTable" not in json.loads(path.read_text())
