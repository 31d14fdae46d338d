"""Atomic config files with a .bak, and the topic / consumer offset tables on top."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from broker.config import parse_config
from broker.consumer_offsets import ConsumerOffsetManager
from broker.persistence import (
    ConfigFileCorrupt,
    JsonConfigFile,
    backup_path,
    read_json_with_backup,
    write_json_atomic,
)
from broker.topic_config import DataVersion, TopicConfig, TopicConfigManager
from tests.support.clock import FakeClock


def ident(data: object) -> object:
    return data


def test_atomic_write_keeps_previous_as_bak(tmp_path: Path) -> None:
    path = tmp_path / "config" / "x.json"
    write_json_atomic(path, {"v": 1})
    assert json.loads(path.read_text()) == {"v": 1}
    assert not backup_path(path).exists()
    write_json_atomic(path, {"v": 2})
    assert json.loads(path.read_text()) == {"v": 2}
    assert json.loads(backup_path(path).read_text()) == {"v": 1}
    assert sorted(p.name for p in path.parent.iterdir()) == ["x.json", "x.json.bak"]


def test_corrupt_main_file_falls_back_to_bak(tmp_path: Path, caplog: pytest.LogCaptureFixture
                                             ) -> None:
    path = tmp_path / "x.json"
    write_json_atomic(path, {"v": 1})
    write_json_atomic(path, {"v": 2})
    path.write_text('{"v": 3, "trunc')  # torn by something outside our writer
    assert read_json_with_backup(path, ident) == {"v": 1}
    assert "unreadable" in caplog.text and "backup" in caplog.text


def test_wrong_shape_counts_as_corrupt(tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    write_json_atomic(path, {"v": 1})
    write_json_atomic(path, ["not", "a", "dict"])

    def parse(data: object) -> int:
        return int(data["v"])  # type: ignore[index]

    assert read_json_with_backup(path, parse) == 1


def test_missing_files_are_none_but_unreadable_ones_refuse(tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    assert read_json_with_backup(path, ident) is None
    path.write_text("garbage")
    with pytest.raises(ConfigFileCorrupt):
        read_json_with_backup(path, ident)
    backup_path(path).write_text("more garbage")
    with pytest.raises(ConfigFileCorrupt, match="x.json.bak"):
        read_json_with_backup(path, ident)


def test_only_bak_left_is_loaded(tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    write_json_atomic(path, {"v": 1})
    write_json_atomic(path, {"v": 2})
    path.unlink()
    assert read_json_with_backup(path, ident) == {"v": 1}


def test_older_snapshot_never_overwrites_newer(tmp_path: Path) -> None:
    f = JsonConfigFile(tmp_path / "x.json")
    assert f.write(2, {"v": 2})
    assert not f.write(1, {"v": 1})
    assert json.loads(f.path.read_text()) == {"v": 2}


# -- topics.json -------------------------------------------------------------------------------
def topic_manager(tmp_path: Path, clock: FakeClock, **props: str) -> TopicConfigManager:
    config = parse_config({"brokerName": "broker-a", "brokerClusterName": "C1", **props},
                          env={}).broker
    return TopicConfigManager(tmp_path / "config" / "topics.json", config, clock)


def test_topic_table_round_trip_and_system_topics(tmp_path: Path) -> None:
    clock = FakeClock()
    m = topic_manager(tmp_path, clock)
    m.load_and_init()
    assert {"TBW102", "SCHEDULE_TOPIC_XXXX", "C1", "broker-a"} <= set(m.table)
    assert m.table["TBW102"].perm == 7  # read, write, inherit
    first = m.data_version
    assert first.counter == 1
    clock.advance(1)
    created = m.create_in_send("TopicA", 16)
    assert created == TopicConfig("TopicA", 8, 8, 6)
    assert m.data_version == DataVersion(clock(), 2)
    m.persist()

    data = json.loads(m.path.read_text())
    assert data["topicConfigTable"]["TopicA"] == {
        "topicName": "TopicA", "readQueueNums": 8, "writeQueueNums": 8, "perm": 6,
        "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0, "order": False}
    again = topic_manager(tmp_path, clock)
    again.load_and_init()
    assert again.table == m.table
    assert again.data_version == m.data_version  # unchanged table, unchanged version


def test_auto_create_queue_count_and_switch(tmp_path: Path) -> None:
    m = topic_manager(tmp_path, FakeClock(), defaultTopicQueueNums="4")
    assert m.create_in_send("A", 2).read_queue_nums == 2  # type: ignore[union-attr]
    assert m.create_in_send("B", 0).read_queue_nums == 4  # type: ignore[union-attr]
    assert m.create_in_send("C", 100).write_queue_nums == 4  # type: ignore[union-attr]
    off = topic_manager(tmp_path, FakeClock(), autoCreateTopicEnable="false")
    off.load_and_init()
    assert off.create_in_send("D", 4) is None
    assert "TBW102" not in off.table


def test_corrupt_topics_json_loads_bak(tmp_path: Path) -> None:
    m = topic_manager(tmp_path, FakeClock())
    m.load_and_init()
    m.create_in_send("Kept", 4)
    m.persist()
    m.create_in_send("Newer", 4)
    m.persist()
    m.path.write_bytes(m.path.read_bytes()[:40])
    again = topic_manager(tmp_path, FakeClock())
    again.load_and_init()
    assert "Kept" in again.table and "Newer" not in again.table


def test_bad_topic_config_in_file_is_corrupt(tmp_path: Path) -> None:
    m = topic_manager(tmp_path, FakeClock())
    m.path.parent.mkdir(parents=True)
    m.path.write_text(json.dumps({"topicConfigTable": {"bad topic": {
        "topicName": "bad topic", "readQueueNums": 1, "writeQueueNums": 1}}}))
    with pytest.raises(ConfigFileCorrupt, match="characters outside"):
        m.load_and_init()


# -- consumerOffset.json ------------------------------------------------------------------------
def test_consumer_offsets_round_trip(tmp_path: Path) -> None:
    clock = FakeClock()
    path = tmp_path / "config" / "consumerOffset.json"
    m = ConsumerOffsetManager(path, clock)
    assert not m.load()
    m.commit_offset("G1", "TopicA", 0, 10)
    m.commit_offset("G1", "TopicA", 3, 7)
    m.commit_offset("G@2", "TopicB", 1, 5)
    assert m.dirty
    assert asyncio.run(m.persist_if_dirty())
    assert not m.dirty and not asyncio.run(m.persist_if_dirty())
    data = json.loads(path.read_text())
    assert data["offsetTable"] == {"TopicA@G1": {"0": 10, "3": 7}, "TopicB@G@2": {"1": 5}}
    assert data["dataVersion"]["counter"] == 1

    again = ConsumerOffsetManager(path, clock)
    assert again.load()
    assert again.query_offset("G1", "TopicA", 3) == 7
    assert again.query_offset("G@2", "TopicB", 1) == 5
    assert again.query_offset("G1", "TopicA", 1) == -1
    assert sorted(again.entries()) == [("TopicA", "G1", 0, 10), ("TopicA", "G1", 3, 7),
                                       ("TopicB", "G@2", 1, 5)]
    assert again.groups() == {"G1", "G@2"}
    again.clean_topic("TopicA")
    assert again.groups() == {"G@2"} and again.dirty


def test_corrupt_offsets_fall_back_to_bak(tmp_path: Path) -> None:
    path = tmp_path / "consumerOffset.json"
    m = ConsumerOffsetManager(path, FakeClock())
    m.commit_offset("G", "T", 0, 1)
    m.persist()
    m.commit_offset("G", "T", 0, 2)
    m.persist()
    path.write_text("\x00" * 10)
    again = ConsumerOffsetManager(path, FakeClock())
    assert again.load()
    assert again.query_offset("G", "T", 0) == 1
