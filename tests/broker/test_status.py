"""Store statuses -> response codes; topic rules of a send (SPEC §2.2)."""

from __future__ import annotations

import pytest

from broker.status import (
    GET_STATUS_PROTO,
    PUT_STATUS_CODES,
    STORED_STATUSES,
    pull_code,
    put_status,
)
from broker.topic_config import TopicConfig, config_problem, send_topic_problem
from mqproto import common_pb2, messaging_pb2
from store.constants import GetMessageStatus, PutMessageStatus


def test_every_put_status_has_the_code_of_the_same_name() -> None:
    assert set(PUT_STATUS_CODES) == set(PutMessageStatus)
    for put, code in PUT_STATUS_CODES.items():
        expected = "SUCCESS" if put is PutMessageStatus.PUT_OK else put.value
        assert common_pb2.ResponseCode.Name(code) == expected


def test_stored_statuses_are_ok_and_the_three_partial_ones() -> None:
    assert {PutMessageStatus.PUT_OK, PutMessageStatus.FLUSH_DISK_TIMEOUT,
                               PutMessageStatus.FLUSH_SLAVE_TIMEOUT,
                               PutMessageStatus.SLAVE_NOT_AVAILABLE} == STORED_STATUSES


def test_put_status_remarks_give_the_reason_once() -> None:
    assert put_status(PutMessageStatus.PUT_OK).remark == ""
    s = put_status(PutMessageStatus.MESSAGE_ILLEGAL, "body of 9 bytes exceeds maxMessageSize 8")
    assert s.code == common_pb2.MESSAGE_ILLEGAL
    # The code is not repeated in the remark (clients print "CODE: remark").
    assert s.remark == "body of 9 bytes exceeds maxMessageSize 8"
    for put in PutMessageStatus:
        assert not put_status(put).remark.startswith(put.value)
    busy = put_status(PutMessageStatus.OS_PAGECACHE_BUSY)
    assert busy.code == common_pb2.OS_PAGECACHE_BUSY and "flow control" in busy.remark


S = GetMessageStatus


@pytest.mark.parametrize(("get", "offset", "code"), [
    (S.FOUND, 5, common_pb2.SUCCESS),
    (S.NO_MATCHED_MESSAGE, 5, common_pb2.NO_MATCHED_MSG),
    (S.MESSAGE_WAS_REMOVING, 5, common_pb2.NO_MATCHED_MSG),
    (S.OFFSET_OVERFLOW_ONE, 5, common_pb2.NO_NEW_MSG),
    (S.OFFSET_FOUND_NULL, 5, common_pb2.NO_NEW_MSG),
    (S.NO_MESSAGE_IN_QUEUE, 0, common_pb2.NO_NEW_MSG),
    (S.NO_MESSAGE_IN_QUEUE, 3, common_pb2.OFFSET_ILLEGAL),
    (S.NO_MATCHED_LOGIC_QUEUE, 0, common_pb2.NO_NEW_MSG),
    (S.NO_MATCHED_LOGIC_QUEUE, 3, common_pb2.OFFSET_ILLEGAL),
    (S.OFFSET_TOO_SMALL, 0, common_pb2.OFFSET_ILLEGAL),
    (S.OFFSET_OVERFLOW_BADLY, 9, common_pb2.OFFSET_ILLEGAL),
])
def test_pull_codes_as_rocketmq(get: GetMessageStatus, offset: int, code: int) -> None:
    assert pull_code(get, offset) == code


def test_get_status_travels_by_name() -> None:
    for get, value in GET_STATUS_PROTO.items():
        assert messaging_pb2.GetMessageStatus.Name(value) == get.value


@pytest.mark.parametrize(("topic", "problem"), [
    ("TopicTest", None),
    ("%RETRY%group_1", None),
    ("a|b-c_d", None),
    ("", "empty"),
    ("bad topic", "characters outside"),
    ("topic.with.dots", "characters outside"),
    ("t" * 128, "longer than 127"),
    ("SCHEDULE_TOPIC_XXXX", "reserved system topic"),
    ("RMQ_SYS_TRANS_HALF_TOPIC", "reserved system topic"),
    ("RMQ_SYS_TRANS_OP_HALF_TOPIC", "reserved system topic"),
    ("rmq_sys_anything", "reserved system topic"),
    ("TBW102", "not allowed"),
])
def test_send_topic_rules(topic: str, problem: str | None) -> None:
    got = send_topic_problem(topic)
    if problem is None:
        assert got is None
    else:
        assert got is not None and problem in got
    assert send_topic_problem("t" * 127) is None


def test_topic_config_problems() -> None:
    assert config_problem(TopicConfig("T", 4, 4)) is None
    assert config_problem(TopicConfig("T", 0, 4)) is None
    assert "queue counts" in (config_problem(TopicConfig("T", 0, 0)) or "")
    assert "queue counts" in (config_problem(TopicConfig("T", -1, 4)) or "")
    assert "perm" in (config_problem(TopicConfig("T", 1, 1, perm=99)) or "")


def test_the_v2_endpoint_keeps_the_brokers_code_name_in_its_message() -> None:
    """A put refused with SERVICE_NOT_AVAILABLE is INTERNAL_SERVER_ERROR in v2: its message
    names the broker's code once (the remark no longer does)."""
    from proxy.convert import v2_status

    refused = v2_status(put_status(PutMessageStatus.SERVICE_NOT_AVAILABLE, "disk full: x"))
    assert refused.message == "SERVICE_NOT_AVAILABLE: disk full: x"
    same_name = v2_status(common_pb2.Status(code=common_pb2.TOPIC_NOT_EXIST,
                                            remark="topic T not exist"))
    assert same_name.message == "TOPIC_NOT_EXIST: topic T not exist"
    assert v2_status(common_pb2.Status(code=common_pb2.SUCCESS)).message == "OK"
