"""Issue 18, the broker's side of many topics: batch create (one persisted write, one
registration), keep-alive registrations without the table, and a refused registration
that fails the boot instead of printing "boot success"."""

from __future__ import annotations

import asyncio
import json
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from broker.admin import AdminServicer
from broker.config import BrokerConfig
from broker.register_body import TopicTableEncoder, encode_topic_table
from broker.registration import RegistrationRefused
from broker.topic_config import DataVersion, TopicConfig, TopicConfigManager, topics_file
from common.constants import PERM_READ, PERM_READ_WRITE
from mqproto import admin_pb2, common_pb2, namesrv_pb2
from nameserver.controller import NamesrvController
from remoting.serving import run_steps_on_loop
from tests.broker.test_registration import NamesrvThread
from tests.support.brokers import BrokerThread
from tests.support.waiting import wait_until

Start = Callable[..., BrokerThread]


@pytest.fixture
def namesrv() -> Iterator[NamesrvThread]:
    n = NamesrvThread()
    yield n
    n.stop()


def configs(n: int, prefix: str = "Batch") -> list[common_pb2.TopicConfig]:
    return [common_pb2.TopicConfig(topic_name=f"{prefix}{i:05d}", read_queue_nums=8,
                                   write_queue_nums=8, perm=6) for i in range(n)]


def test_batch_create_of_5000_topics_is_one_write_and_one_registration(
        namesrv: NamesrvThread, start_broker: Start) -> None:
    b = start_broker(namesrvAddr=namesrv.address)
    topics, api = b.controller.topics, b.controller.outer_api
    writes, full = topics.file.writes, api.full_bodies_sent
    r = b.admin.CreateOrUpdateTopics(
        admin_pb2.CreateOrUpdateTopicsRequest(topic_configs=configs(5000)), timeout=30)
    assert r.status.code == common_pb2.SUCCESS, r.status
    assert (r.created, r.updated) == (5000, 0)
    assert topics.file.writes == writes + 1
    saved = json.loads(topics.path.read_text())["topicConfigTable"]
    assert {f"Batch{i:05d}" for i in range(5000)} <= set(saved)
    wait_until(lambda: namesrv.route("Batch04999") is not None, timeout=10,
               message="the batch registered")
    wait_until(lambda: api.full_bodies_sent == full + 1, timeout=5, message="one registration")
    # Again: nothing changes, nothing is written.
    r = b.admin.CreateOrUpdateTopics(
        admin_pb2.CreateOrUpdateTopicsRequest(topic_configs=configs(5000)), timeout=30)
    assert (r.created, r.updated) == (0, 0)
    assert topics.file.writes == writes + 1


def test_batch_create_is_refused_whole(start_broker: Start) -> None:
    b = start_broker()
    bad = [*configs(10), common_pb2.TopicConfig(topic_name="bad topic", read_queue_nums=1,
                                                write_queue_nums=1, perm=6)]
    r = b.admin.CreateOrUpdateTopics(admin_pb2.CreateOrUpdateTopicsRequest(topic_configs=bad),
                                     timeout=10)
    assert r.status.code == common_pb2.INVALID_PARAMETER
    assert "no topic of the batch was created" in r.status.remark
    assert b.call(lambda: b.controller.topics.get("Batch00000")) is None
    twice = [*configs(2), *configs(1)]
    r = b.admin.CreateOrUpdateTopics(admin_pb2.CreateOrUpdateTopicsRequest(topic_configs=twice),
                                     timeout=10)
    assert r.status.code == common_pb2.INVALID_PARAMETER and "twice" in r.status.remark


def test_concurrent_creates_share_writes(start_broker: Start) -> None:
    b = start_broker()
    topics = b.controller.topics
    writes = topics.file.writes

    async def create_many() -> None:  # 50 creates at once, on the broker's loop
        admin = AdminServicer(b.controller.context)
        await asyncio.gather(*(admin.CreateOrUpdateTopic(
            admin_pb2.CreateOrUpdateTopicRequest(topic_config=c), None)  # type: ignore[arg-type]
            for c in configs(50, "Burst")))

    b.run(create_many())
    assert b.call(lambda: topics.get("Burst00049")) is not None
    assert topics.file.writes - writes <= 3  # 50 creates, coalesced


def test_unchanged_registrations_do_not_resend_the_table(
        namesrv: NamesrvThread, start_broker: Start) -> None:
    b = start_broker(namesrvAddr=namesrv.address)
    api = b.controller.outer_api
    assert (api.full_bodies_sent, api.keep_alives_sent) == (1, 0)
    for _ in range(3):
        assert b.run(b.controller.register_broker_all()) == 1
    assert (api.full_bodies_sent, api.keep_alives_sent) == (1, 3)
    b.admin.CreateOrUpdateTopic(admin_pb2.CreateOrUpdateTopicRequest(
        topic_config=configs(1, "Changed")[0]), timeout=10)
    wait_until(lambda: namesrv.route("Changed00000") is not None, timeout=10,
               message="the change registered")
    assert api.full_bodies_sent == 2
    # A name server that lost the broker asks for the table: it is sent at once.
    rim = namesrv.controller.route_info_manager
    namesrv.run(_unregister(namesrv.controller, b.address))
    assert namesrv.route("Changed00000") is None
    assert b.run(b.controller.register_broker_all()) == 1
    assert api.full_bodies_sent == 3
    assert namesrv.route("Changed00000") is not None
    assert b.address in rim.broker_live_table


async def _unregister(controller: NamesrvController, addr: str) -> None:
    assert controller.route_info_manager.unregister_broker("TestCluster", addr, "broker-a", 0)


def test_a_refused_registration_fails_the_boot(start_broker: Start,
                                               caplog: pytest.LogCaptureFixture) -> None:
    # SCHEDULE_TOPIC_XXXX has 18 queues: a name server allowing 4 refuses the table.
    strict = NamesrvThread(max_topic_queue_nums=4)
    try:
        with pytest.raises(RegistrationRefused, match="refused"):
            start_broker(namesrvAddr=strict.address)
        assert "REFUSED by name server" in caplog.text
    finally:
        strict.stop()


def test_registration_body_reencodes_only_changed_topics_and_matches_a_full_encode() -> None:
    table = {f"T{i:05d}": TopicConfig(f"T{i:05d}", 8, 8) for i in range(2500)}
    encoder = TopicTableEncoder()

    def body(permission: int = PERM_READ_WRITE) -> bytes:
        return zlib.decompress(asyncio.run(encoder.encode(list(table.values()), permission)))

    assert body() == zlib.decompress(encode_topic_table(list(table.values()), PERM_READ_WRITE))
    kept = encoder._entries["T00001"]
    table["T00002"] = TopicConfig("T00002", 4, 4)  # changed
    del table["T00003"]  # removed
    table["New"] = TopicConfig("New", 1, 1)  # added
    for permission in (PERM_READ_WRITE, PERM_READ, PERM_READ_WRITE):
        raw = body(permission)
        assert raw == zlib.decompress(encode_topic_table(list(table.values()), permission))
    assert encoder._entries["T00001"] is not kept  # re-made after the permission changed
    kept = encoder._entries["T00001"]
    body()
    assert encoder._entries["T00001"] is kept and "T00003" not in encoder._entries
    parsed = namesrv_pb2.TopicConfigTable.FromString(body()).topic_configs
    assert [c.topic_name for c in parsed] == list(table)
    assert parsed[2].read_queue_nums == 4


def test_topic_file_from_kept_parts_is_the_full_encode(tmp_path: Path) -> None:
    manager = TopicConfigManager(tmp_path / "topics.json", BrokerConfig(), lambda: 1)
    table = {f"T{(i * 7919) % 3000:05d}": None for i in range(3000)}  # not in name order
    state = {n: TopicConfig(n, 8, 8) for n in table}

    def full(state: dict[str, TopicConfig]) -> bytes:
        return json.dumps({"dataVersion": DataVersion(1, 2).to_json(),
                           "topicConfigTable": {n: c.to_json() for n, c in state.items()}},
                          sort_keys=True, separators=(",", ":")).encode()

    assert manager.encode_state((dict(state), DataVersion(1, 2))) == full(state)
    state["T00002"] = TopicConfig("T00002", 4, 4, 4)
    del state["T00003"]
    state["A-first"] = TopicConfig("A-first", 1, 1)
    state["Z-last"] = TopicConfig("Z-last", 1, 1)
    assert manager.encode_state((dict(state), DataVersion(1, 2))) == full(state)
    assert asyncio.run(_encode_on_loop(manager, state)) == full(state)


async def _encode_on_loop(manager: TopicConfigManager, state: dict[str, TopicConfig]) -> bytes:
    return topics_file(*await run_steps_on_loop(manager.encode_steps((dict(state),
                                                                      DataVersion(1, 2)))))
