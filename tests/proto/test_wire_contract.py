"""The wire enums carry every status SPEC §2.7 / §2.8 lets reach a client."""

from __future__ import annotations

from mqproto import (
    admin_pb2,
    admin_pb2_grpc,
    common_pb2,
    messaging_pb2,
    messaging_pb2_grpc,
    namesrv_pb2,
    namesrv_pb2_grpc,
)

# SPEC §2.7: the store's put results; PUT_OK answers SUCCESS.
PUT_STATUSES = (
    "FLUSH_DISK_TIMEOUT", "FLUSH_SLAVE_TIMEOUT", "SLAVE_NOT_AVAILABLE", "SERVICE_NOT_AVAILABLE",
    "CREATE_MAPPED_FILE_FAILED", "MESSAGE_ILLEGAL", "PROPERTIES_SIZE_EXCEEDED",
    "OS_PAGECACHE_BUSY", "UNKNOWN_ERROR",
)
# SPEC §2.8: the store's getMessage results.
GET_MESSAGE_STATUSES = (
    "FOUND", "NO_MATCHED_MESSAGE", "MESSAGE_WAS_REMOVING", "OFFSET_FOUND_NULL",
    "OFFSET_OVERFLOW_BADLY", "OFFSET_OVERFLOW_ONE", "OFFSET_TOO_SMALL",
    "NO_MATCHED_LOGIC_QUEUE", "NO_MESSAGE_IN_QUEUE",
)


def test_response_code_has_the_put_and_pull_statuses() -> None:
    names = {v.name for v in common_pb2.ResponseCode.DESCRIPTOR.values}
    assert common_pb2.RESPONSE_CODE_UNSPECIFIED == 0, "0 must never read as success"
    assert {"SUCCESS", "TOPIC_NOT_EXIST", *PUT_STATUSES} <= names
    assert {"NO_NEW_MSG", "NO_MATCHED_MSG", "OFFSET_ILLEGAL"} <= names


def test_get_message_status_matches_the_store() -> None:
    values = messaging_pb2.GetMessageStatus.DESCRIPTOR.values
    names = [v.name for v in values if not v.name.endswith("UNSPECIFIED")]
    assert names == list(GET_MESSAGE_STATUSES)


def test_services_have_the_planned_rpcs() -> None:
    def rpcs(module: object, service: str) -> set[str]:
        descriptor = module.DESCRIPTOR.services_by_name[service]  # type: ignore[attr-defined]
        return {method.name for method in descriptor.methods}

    assert rpcs(namesrv_pb2, "NamesrvService") == {
        "RegisterBroker", "UnregisterBroker", "GetRouteInfoByTopic", "GetRouteInfoByTopics",
        "GetClusterInfo", "GetAllTopicList", "WatchBrokerLink",
    }
    assert {
        "SendMessage", "SendBatch", "PullMessage", "QueryMessageById", "QueryMessageByKey",
        "SearchOffsetByTimestamp", "UpdateConsumerOffset", "QueryConsumerOffset",
        "GetMinOffset", "GetMaxOffset", "EndTransaction",
    } <= rpcs(messaging_pb2, "MessagingService")
    assert rpcs(admin_pb2, "AdminService") >= {
        "CreateOrUpdateTopic", "DeleteTopic", "GetTopicList", "GetRuntimeInfo",
        "GetConsumeStats", "GetHAStatus",
    }
    for module in (namesrv_pb2_grpc, messaging_pb2_grpc, admin_pb2_grpc):
        assert module.__name__.startswith("mqproto.")


def test_message_round_trip() -> None:
    message = messaging_pb2.Message(
        topic="TopicTest",
        tag="TagA",
        keys=["k1", "k2"],
        body=b"\x00hello",
        user_properties={"a": "1"},
        system_properties=messaging_pb2.SystemProperties(
            message_id="7F0000010001",
            delay_time_level=3,
            transaction_type=messaging_pb2.TRANSACTION_PREPARED_TYPE,
        ),
    )
    decoded = messaging_pb2.Message.FromString(message.SerializeToString())
    assert decoded == message
    assert list(decoded.keys) == ["k1", "k2"]
    assert decoded.system_properties.transaction_type == messaging_pb2.TRANSACTION_PREPARED_TYPE
    request = messaging_pb2.PullMessageRequest(topic="TopicTest", queue_offset=5)
    assert not request.HasField("commit_offset")
