"""broker.conf parsing: RocketMQ key names, Java properties syntax, clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.config import (
    ConfigError,
    identity_problem,
    load_config_file,
    parse_config,
    read_properties,
)
from store.constants import BrokerRole, FlushDiskType

SAMPLE = """\
# RocketMQ's 2m-2s-async broker-a.properties, with a few extra keys
brokerClusterName=DefaultCluster
brokerName = broker-a
brokerId=0
namesrvAddr=10.0.0.1:9876;10.0.0.2:9876
listenPort: 10911
haListenPort 10912
deleteWhen=04
fileReservedTime=48
brokerRole=ASYNC_MASTER
flushDiskType=SYNC_FLUSH
storePathRootDir=/data/rocketmq/store
mappedFileSizeCommitLog=4194304
autoCreateTopicEnable=false
defaultTopicQueueNums=4
slaveReadEnable=true
brokerIP1=10.0.0.5
brokerIP2=broker-a-0
! a bang comment
flushConsumerOffsetInterval=\\
  1000
"""


def test_reads_rocketmq_keys_for_broker_and_store() -> None:
    loaded = parse_config(read_properties(SAMPLE), env={})
    b, s = loaded.broker, loaded.store
    assert (b.broker_cluster_name, b.broker_name, b.broker_id) == ("DefaultCluster", "broker-a", 0)
    assert b.namesrv_addr_list == ["10.0.0.1:9876", "10.0.0.2:9876"]
    assert (b.listen_port, b.ha_listen_port, b.broker_ip1) == (10911, 10912, "10.0.0.5")
    assert b.broker_ip2 == "broker-a-0"
    assert b.auto_create_topic_enable is False
    assert b.default_topic_queue_nums == 4
    assert b.slave_read_enable is True
    assert b.flush_consumer_offset_interval == 1000
    assert b.broker_role is BrokerRole.ASYNC_MASTER
    assert s.flush_disk_type is FlushDiskType.SYNC_FLUSH
    assert s.store_path_root_dir == "/data/rocketmq/store"
    assert s.mapped_file_size_commit_log == 4194304
    assert (s.file_reserved_time, s.delete_when) == (48, "04")
    assert loaded.unknown_keys == []


def test_defaults_follow_rocketmq() -> None:
    loaded = parse_config({}, env={})
    b = loaded.broker
    assert (b.broker_cluster_name, b.broker_id, b.listen_port) == ("DefaultCluster", 0, 10911)
    assert b.auto_create_topic_enable is True
    assert b.default_topic_queue_nums == 8
    assert b.register_name_server_period == 30_000
    assert b.flush_consumer_offset_interval == 5_000
    assert b.namesrv_addr_list == []
    assert loaded.store.flush_disk_type is FlushDiskType.ASYNC_FLUSH
    assert loaded.store.delay_levels_ms[:4] == (1000, 5000, 10_000, 30_000)
    assert (len(loaded.store.delay_levels_ms), loaded.store.delay_levels_ms[-1]) == (18, 7_200_000)
    assert parse_config({"messageDelayLevel": "2m 1h 1d"}, env={}).store.delay_levels_ms == (
        120_000, 3_600_000, 86_400_000)


def test_namesrv_addr_from_environment_when_absent() -> None:
    assert parse_config({}, env={"NAMESRV_ADDR": "h:1;h:2"}).broker.namesrv_addr_list == [
        "h:1", "h:2"]
    loaded = parse_config({"namesrvAddr": "x:3"}, env={"NAMESRV_ADDR": "h:1"})
    assert loaded.broker.namesrv_addr_list == ["x:3"]


def test_unknown_keys_are_reported() -> None:
    loaded = parse_config({"brokerNmae": "typo", "brokerName": "b"}, env={})
    assert loaded.unknown_keys == ["brokerNmae"]


@pytest.mark.parametrize(("props", "message"), [
    ({"listenPort": "ten"}, "listenPort: expected an integer"),
    ({"autoCreateTopicEnable": "yes"}, "autoCreateTopicEnable: expected true or false"),
    ({"brokerRole": "LEADER"}, "brokerRole: expected one of"),
    ({"flushDiskType": "SOMETIMES"}, "flush_disk_type: .SOMETIMES"),
    ({"listenPort": "70000"}, "listenPort: 70000 is not a port"),
    ({"namesrvAddr": "localhost"}, "namesrvAddr: expected HOST:PORT"),
    ({"defaultTopicQueueNums": "0"}, "defaultTopicQueueNums"),
    ({"brokerRole": "SLAVE", "brokerId": "0"}, "SLAVE's brokerId must be > 0"),
    ({"brokerName": ""}, "brokerName"),
    ({"messageDelayLevel": "1s 5x"}, "bad delay level '5x'"),
    ({"messageDelayLevel": "0s"}, "bad delay level '0s'"),
    ({"messageDelayLevel": " "}, "messageDelayLevel has no levels"),
    ({"flushDelayOffsetInterval": "0"}, "flush_delay_offset_interval"),
])
def test_bad_values_are_config_errors(props: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_config(props, env={})


def test_master_is_always_broker_id_0() -> None:
    assert parse_config({"brokerId": "3"}, env={}).broker.broker_id == 0
    slave = parse_config({"brokerId": "2", "brokerRole": "SLAVE"}, env={}).broker
    assert (slave.broker_id, slave.is_slave) == (2, True)


def test_load_config_file_with_overrides(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text(SAMPLE)
    loaded = load_config_file(conf, {"namesrvAddr": "127.0.0.1:1"})
    assert loaded.broker.namesrv_addr_list == ["127.0.0.1:1"]
    with pytest.raises(ConfigError, match="cannot read"):
        load_config_file(tmp_path / "missing.conf")


@pytest.mark.parametrize(("text", "overrides", "env", "defaulted"), [
    ("brokername=a\nnamesrvaddr=127.0.0.1:9876\nlistenPort=0\n", {}, "", None),
    ("", {}, "", None),
    ("listenPort=0\n", {"brokerName": "a"}, "", ["namesrvAddr"]),  # --set brokerName=a
    ("listenPort=0\n", {"namesrvAddr": "127.0.0.1:1"}, "", ["brokerName"]),  # -n
    ("listenPort=0\n", {}, "127.0.0.1:1", ["brokerName"]),  # $NAMESRV_ADDR (compose)
    ("brokerName=a\nnamesrvAddr=127.0.0.1:1\n", {}, "", []),
])
def test_a_conf_must_set_a_broker_name_or_a_name_server(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str,
        overrides: dict[str, str], env: str, defaulted: list[str] | None) -> None:
    """brokerName and the name servers cannot be defaulted sensibly: a conf that gives
    neither (a file of misspelt keys boots on defaults otherwise) is refused, saying which
    keys it needs; one of the two missing is a warning (startup.py)."""
    monkeypatch.setenv("NAMESRV_ADDR", env)
    conf = tmp_path / "broker.conf"
    conf.write_text(text)
    loaded = load_config_file(conf, overrides)
    problem = identity_problem(loaded, conf)
    if defaulted is None:
        assert problem is not None and problem.startswith(
            f"{conf} sets none of the keys a broker cannot default, so it does not start: "
            "brokerName=NAME (else this host's name); namesrvAddr=HOST:PORT;HOST:PORT, -n "
            "or $NAMESRV_ADDR")
        assert ("its unknown keys: brokername, namesrvaddr" in problem) == bool(text)
    else:
        assert problem is None and loaded.defaulted_keys == defaulted


def test_properties_syntax() -> None:
    props = read_properties("a=1\n  b : 2 \nc 3\n#d=4\n\ne=x=y\nf=\n")
    assert props == {"a": "1", "b": "2", "c": "3", "e": "x=y", "f": ""}
