# ruff: noqa
from . import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ResetOffsetTarget(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RESET_OFFSET_TARGET_UNSPECIFIED: _ClassVar[ResetOffsetTarget]
    RESET_TO_TIMESTAMP: _ClassVar[ResetOffsetTarget]
    RESET_TO_EARLIEST: _ClassVar[ResetOffsetTarget]
    RESET_TO_LATEST: _ClassVar[ResetOffsetTarget]
RESET_OFFSET_TARGET_UNSPECIFIED: ResetOffsetTarget
RESET_TO_TIMESTAMP: ResetOffsetTarget
RESET_TO_EARLIEST: ResetOffsetTarget
RESET_TO_LATEST: ResetOffsetTarget

class CreateOrUpdateTopicRequest(_message.Message):
    __slots__ = ("topic_config",)
    TOPIC_CONFIG_FIELD_NUMBER: _ClassVar[int]
    topic_config: _common_pb2.TopicConfig
    def __init__(self, topic_config: _Optional[_Union[_common_pb2.TopicConfig, _Mapping]] = ...) -> None: ...

class CreateOrUpdateTopicResponse(_message.Message):
    __slots__ = ("status",)
    STATUS_FIELD_NUMBER: _ClassVar[int]
    status: _common_pb2.Status
    def __init__(self, status: _Optional[_Union[_common_pb2.Status, _Mapping]] = ...) -> None: ...

class CreateOrUpdateTopicsRequest(_message.Message):
    __slots__ = ("topic_configs",)
    TOPIC_CONFIGS_FIELD_NUMBER: _ClassVar[int]
    topic_configs: _containers.RepeatedCompositeFieldContainer[_common_pb2.TopicConfig]
    def __init__(self, topic_configs: _Optional[_Iterable[_Union[_common_pb2.TopicConfig, _Mapping]]] = ...) -> None: ...

class CreateOrUpdateTopicsResponse(_message.Message):
    __slots__ = ("status", "created", "updated")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    UPDATED_FIELD_NUMBER: _ClassVar[int]
    status: _common_pb2.Status
    created: int
    updated: int
    def __init__(self, status: _Optional[_Union[_common_pb2.Status, _Mapping]] = ..., created: _Optional[int] = ..., updated: _Optional[int] = ...) -> None: ...

class DeleteTopicRequest(_message.Message):
    __slots__ = ("topic",)
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    topic: str
    def __init__(self, topic: _Optional[str] = ...) -> None: ...

class DeleteTopicResponse(_message.Message):
    __slots__ = ("status",)
    STATUS_FIELD_NUMBER: _ClassVar[int]
    status: _common_pb2.Status
    def __init__(self, status: _Optional[_Union[_common_pb2.Status, _Mapping]] = ...) -> None: ...

class GetTopicListRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetTopicListResponse(_message.Message):
    __slots__ = ("status", "topic_configs", "data_version")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    TOPIC_CONFIGS_FIELD_NUMBER: _ClassVar[int]
    DATA_VERSION_FIELD_NUMBER: _ClassVar[int]
    status: _common_pb2.Status
    topic_configs: _containers.RepeatedCompositeFieldContainer[_common_pb2.TopicConfig]
    data_version: _common_pb2.DataVersion
    def __init__(self, status: _Optional[_Union[_common_pb2.Status, _Mapping]] = ..., topic_configs: _Optional[_Iterable[_Union[_common_pb2.TopicConfig, _Mapping]]] = ..., data_version: _Optional[_Union[_common_pb2.DataVersion, _Mapping]] = ...) -> None: ...

class GetRuntimeInfoRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetRuntimeInfoResponse(_message.Message):
    __slots__ = ("status", "table", "broker_name", "broker_id", "broker_role", "snapshot_timestamp", "commit_log_min_offset", "commit_log_max_offset", "dispatch_behind_bytes", "put_tps", "get_total_tps", "slave_ack_offsets", "earliest_message_store_timestamp", "ha_connection_info", "ha_client_info")
    class TableEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class SlaveAckOffsetsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    STATUS_FIELD_NUMBER: _ClassVar[int]
    TABLE_FIELD_NUMBER: _ClassVar[int]
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    BROKER_ROLE_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    COMMIT_LOG_MIN_OFFSET_FIELD_NUMBER: _ClassVar[int]
    COMMIT_LOG_MAX_OFFSET_FIELD_NUMBER: _ClassVar[int]
    DISPATCH_BEHIND_BYTES_FIELD_NUMBER: _ClassVar[int]
    PUT_TPS_FIELD_NUMBER: _ClassVar[int]
    GET_TOTAL_TPS_FIELD_NUMBER: _ClassVar[int]
    SLAVE_ACK_OFFSETS_FIELD_NUMBER: _ClassVar[int]
    EARLIEST_MESSAGE_STORE_TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    HA_CONNECTION_INFO_FIELD_NUMBER: _ClassVar[int]
    HA_CLIENT_INFO_FIELD_NUMBER: _ClassVar[int]
    status: _common_pb2.Status
    table: _containers.ScalarMap[str, str]
    broker_name: str
    broker_id: int
    broker_role: str
    snapshot_timestamp: int
    commit_log_min_offset: int
    commit_log_max_offset: int
    dispatch_behind_bytes: int
    put_tps: float
    get_total_tps: float
    slave_ack_offsets: _containers.ScalarMap[str, int]
    earliest_message_store_timestamp: int
    ha_connection_info: _containers.RepeatedCompositeFieldContainer[HAConnectionRuntimeInfo]
    ha_client_info: HAClientRuntimeInfo
    def __init__(self, status: _Optional[_Union[_common_pb2.Status, _Mapping]] = ..., table: _Optional[_Mapping[str, str]] = ..., broker_name: _Optional[str] = ..., broker_id: _Optional[int] = ..., broker_role: _Optional[str] = ..., snapshot_timestamp: _Optional[int] = ..., commit_log_min_offset: _Optional[int] = ..., commit_log_max_offset: _Optional[int] = ..., dispatch_behind_bytes: _Optional[int] = ..., put_tps: _Optional[float] = ..., get_total_tps: _Optional[float] = ..., slave_ack_offsets: _Optional[_Mapping[str, int]] = ..., earliest_message_store_timestamp: _Optional[int] = ..., ha_connection_info: _Optional[_Iterable[_Union[HAConnectionRuntimeInfo, _Mapping]]] = ..., ha_client_info: _Optional[_Union[HAClientRuntimeInfo, _Mapping]] = ...) -> None: ...

class GetConsumeStatsRequest(_message.Message):
    __slots__ = ("consumer_group", "topic")
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    topic: str
    def __init__(self, consumer_group: _Optional[str] = ..., topic: _Optional[str] = ...) -> None: ...

class OffsetWrapper(_message.Message):
    __slots__ = ("topic", "broker_name", "queue_id", "broker_offset", "consumer_offset", "last_timestamp", "first_unconsumed_timestamp", "queue_min_offset", "last_commit_timestamp", "lag_bytes", "lag_bytes_exact")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    BROKER_OFFSET_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LAST_TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    FIRST_UNCONSUMED_TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    QUEUE_MIN_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LAST_COMMIT_TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    LAG_BYTES_FIELD_NUMBER: _ClassVar[int]
    LAG_BYTES_EXACT_FIELD_NUMBER: _ClassVar[int]
    topic: str
    broker_name: str
    queue_id: int
    broker_offset: int
    consumer_offset: int
    last_timestamp: int
    first_unconsumed_timestamp: int
    queue_min_offset: int
    last_commit_timestamp: int
    lag_bytes: int
    lag_bytes_exact: bool
    def __init__(self, topic: _Optional[str] = ..., broker_name: _Optional[str] = ..., queue_id: _Optional[int] = ..., broker_offset: _Optional[int] = ..., consumer_offset: _Optional[int] = ..., last_timestamp: _Optional[int] = ..., first_unconsumed_timestamp: _Optional[int] = ..., queue_min_offset: _Optional[int] = ..., last_commit_timestamp: _Optional[int] = ..., lag_bytes: _Optional[int] = ..., lag_bytes_exact: _Optional[bool] = ...) -> None: ...

class ConsumeStats(_message.Message):
    __slots__ = ("consumer_group", "offset_table", "consume_tps", "online_consumers")
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    OFFSET_TABLE_FIELD_NUMBER: _ClassVar[int]
    CONSUME_TPS_FIELD_NUMBER: _ClassVar[int]
    ONLINE_CONSUMERS_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    offset_table: _containers.RepeatedCompositeFieldContainer[OffsetWrapper]
    consume_tps: float
    online_consumers: int
    def __init__(self, consumer_group: _Optional[str] = ..., offset_table: _Optional[_Iterable[_Union[OffsetWrapper, _Mapping]]] = ..., consume_tps: _Optional[float] = ..., online_consumers: _Optional[int] = ...) -> None: ...

class GetConsumeStatsResponse(_message.Message):
    __slots__ = ("status", "snapshot_timestamp", "consume_stats")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    CONSUME_STATS_FIELD_NUMBER: _ClassVar[int]
    status: _common_pb2.Status
    snapshot_timestamp: int
    consume_stats: _containers.RepeatedCompositeFieldContainer[ConsumeStats]
    def __init__(self, status: _Optional[_Union[_common_pb2.Status, _Mapping]] = ..., snapshot_timestamp: _Optional[int] = ..., consume_stats: _Optional[_Iterable[_Union[ConsumeStats, _Mapping]]] = ...) -> None: ...

class GetHAStatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class HAConnectionRuntimeInfo(_message.Message):
    __slots__ = ("addr", "slave_ack_offset", "diff", "fall_behind_seconds", "in_sync", "transferred_byte_in_second", "transfer_from_where", "state", "slave_broker_id", "link_addr", "connected", "last_ack_timestamp")
    ADDR_FIELD_NUMBER: _ClassVar[int]
    SLAVE_ACK_OFFSET_FIELD_NUMBER: _ClassVar[int]
    DIFF_FIELD_NUMBER: _ClassVar[int]
    FALL_BEHIND_SECONDS_FIELD_NUMBER: _ClassVar[int]
    IN_SYNC_FIELD_NUMBER: _ClassVar[int]
    TRANSFERRED_BYTE_IN_SECOND_FIELD_NUMBER: _ClassVar[int]
    TRANSFER_FROM_WHERE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    SLAVE_BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    LINK_ADDR_FIELD_NUMBER: _ClassVar[int]
    CONNECTED_FIELD_NUMBER: _ClassVar[int]
    LAST_ACK_TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    addr: str
    slave_ack_offset: int
    diff: int
    fall_behind_seconds: float
    in_sync: bool
    transferred_byte_in_second: int
    transfer_from_where: int
    state: str
    slave_broker_id: int
    link_addr: str
    connected: bool
    last_ack_timestamp: int
    def __init__(self, addr: _Optional[str] = ..., slave_ack_offset: _Optional[int] = ..., diff: _Optional[int] = ..., fall_behind_seconds: _Optional[float] = ..., in_sync: _Optional[bool] = ..., transferred_byte_in_second: _Optional[int] = ..., transfer_from_where: _Optional[int] = ..., state: _Optional[str] = ..., slave_broker_id: _Optional[int] = ..., link_addr: _Optional[str] = ..., connected: _Optional[bool] = ..., last_ack_timestamp: _Optional[int] = ...) -> None: ...

class HAClientRuntimeInfo(_message.Message):
    __slots__ = ("master_addr", "connected", "max_offset", "transferred_byte_in_second", "last_read_timestamp", "last_write_timestamp", "state", "connect_count")
    MASTER_ADDR_FIELD_NUMBER: _ClassVar[int]
    CONNECTED_FIELD_NUMBER: _ClassVar[int]
    MAX_OFFSET_FIELD_NUMBER: _ClassVar[int]
    TRANSFERRED_BYTE_IN_SECOND_FIELD_NUMBER: _ClassVar[int]
    LAST_READ_TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    LAST_WRITE_TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    CONNECT_COUNT_FIELD_NUMBER: _ClassVar[int]
    master_addr: str
    connected: bool
    max_offset: int
    transferred_byte_in_second: int
    last_read_timestamp: int
    last_write_timestamp: int
    state: str
    connect_count: int
    def __init__(self, master_addr: _Optional[str] = ..., connected: _Optional[bool] = ..., max_offset: _Optional[int] = ..., transferred_byte_in_second: _Optional[int] = ..., last_read_timestamp: _Optional[int] = ..., last_write_timestamp: _Optional[int] = ..., state: _Optional[str] = ..., connect_count: _Optional[int] = ...) -> None: ...

class GetHAStatusResponse(_message.Message):
    __slots__ = ("status", "master", "master_commit_log_max_offset", "in_sync_slave_nums", "ha_connection_info", "ha_client_info")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    MASTER_FIELD_NUMBER: _ClassVar[int]
    MASTER_COMMIT_LOG_MAX_OFFSET_FIELD_NUMBER: _ClassVar[int]
    IN_SYNC_SLAVE_NUMS_FIELD_NUMBER: _ClassVar[int]
    HA_CONNECTION_INFO_FIELD_NUMBER: _ClassVar[int]
    HA_CLIENT_INFO_FIELD_NUMBER: _ClassVar[int]
    status: _common_pb2.Status
    master: bool
    master_commit_log_max_offset: int
    in_sync_slave_nums: int
    ha_connection_info: _containers.RepeatedCompositeFieldContainer[HAConnectionRuntimeInfo]
    ha_client_info: HAClientRuntimeInfo
    def __init__(self, status: _Optional[_Union[_common_pb2.Status, _Mapping]] = ..., master: _Optional[bool] = ..., master_commit_log_max_offset: _Optional[int] = ..., in_sync_slave_nums: _Optional[int] = ..., ha_connection_info: _Optional[_Iterable[_Union[HAConnectionRuntimeInfo, _Mapping]]] = ..., ha_client_info: _Optional[_Union[HAClientRuntimeInfo, _Mapping]] = ...) -> None: ...

class GetAllConsumerOffsetRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ConsumerOffsetEntry(_message.Message):
    __slots__ = ("topic", "consumer_group", "queue_id", "offset")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    topic: str
    consumer_group: str
    queue_id: int
    offset: int
    def __init__(self, topic: _Optional[str] = ..., consumer_group: _Optional[str] = ..., queue_id: _Optional[int] = ..., offset: _Optional[int] = ...) -> None: ...

class GetAllConsumerOffsetResponse(_message.Message):
    __slots__ = ("status", "offset_table", "data_version")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    OFFSET_TABLE_FIELD_NUMBER: _ClassVar[int]
    DATA_VERSION_FIELD_NUMBER: _ClassVar[int]
    status: _common_pb2.Status
    offset_table: _containers.RepeatedCompositeFieldContainer[ConsumerOffsetEntry]
    data_version: _common_pb2.DataVersion
    def __init__(self, status: _Optional[_Union[_common_pb2.Status, _Mapping]] = ..., offset_table: _Optional[_Iterable[_Union[ConsumerOffsetEntry, _Mapping]]] = ..., data_version: _Optional[_Union[_common_pb2.DataVersion, _Mapping]] = ...) -> None: ...

class GetAllDelayOffsetRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetAllDelayOffsetResponse(_message.Message):
    __slots__ = ("status", "offset_table")
    class OffsetTableEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: int
        def __init__(self, key: _Optional[int] = ..., value: _Optional[int] = ...) -> None: ...
    STATUS_FIELD_NUMBER: _ClassVar[int]
    OFFSET_TABLE_FIELD_NUMBER: _ClassVar[int]
    status: _common_pb2.Status
    offset_table: _containers.ScalarMap[int, int]
    def __init__(self, status: _Optional[_Union[_common_pb2.Status, _Mapping]] = ..., offset_table: _Optional[_Mapping[int, int]] = ...) -> None: ...

class ResetOffsetRequest(_message.Message):
    __slots__ = ("consumer_group", "topic", "target", "timestamp", "force")
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    FORCE_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    topic: str
    target: ResetOffsetTarget
    timestamp: int
    force: bool
    def __init__(self, consumer_group: _Optional[str] = ..., topic: _Optional[str] = ..., target: _Optional[_Union[ResetOffsetTarget, str]] = ..., timestamp: _Optional[int] = ..., force: _Optional[bool] = ...) -> None: ...

class QueueOffsetReset(_message.Message):
    __slots__ = ("queue_id", "old_offset", "new_offset")
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    OLD_OFFSET_FIELD_NUMBER: _ClassVar[int]
    NEW_OFFSET_FIELD_NUMBER: _ClassVar[int]
    queue_id: int
    old_offset: int
    new_offset: int
    def __init__(self, queue_id: _Optional[int] = ..., old_offset: _Optional[int] = ..., new_offset: _Optional[int] = ...) -> None: ...

class ResetOffsetResponse(_message.Message):
    __slots__ = ("status", "queues")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    status: _common_pb2.Status
    queues: _containers.RepeatedCompositeFieldContainer[QueueOffsetReset]
    def __init__(self, status: _Optional[_Union[_common_pb2.Status, _Mapping]] = ..., queues: _Optional[_Iterable[_Union[QueueOffsetReset, _Mapping]]] = ...) -> None: ...

class RemoveHASlaveRequest(_message.Message):
    __slots__ = ("broker_id",)
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    broker_id: int
    def __init__(self, broker_id: _Optional[int] = ...) -> None: ...

class RemoveHASlaveResponse(_message.Message):
    __slots__ = ("status",)
    STATUS_FIELD_NUMBER: _ClassVar[int]
    status: _common_pb2.Status
    def __init__(self, status: _Optional[_Union[_common_pb2.Status, _Mapping]] = ...) -> None: ...

class MergeConsumerOffsetRequest(_message.Message):
    __slots__ = ("offset_table",)
    OFFSET_TABLE_FIELD_NUMBER: _ClassVar[int]
    offset_table: _containers.RepeatedCompositeFieldContainer[ConsumerOffsetEntry]
    def __init__(self, offset_table: _Optional[_Iterable[_Union[ConsumerOffsetEntry, _Mapping]]] = ...) -> None: ...

class MergeConsumerOffsetResponse(_message.Message):
    __slots__ = ("status", "merged")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    MERGED_FIELD_NUMBER: _ClassVar[int]
    status: _common_pb2.Status
    merged: int
    def __init__(self, status: _Optional[_Union[_common_pb2.Status, _Mapping]] = ..., merged: _Optional[int] = ...) -> None: ...

class GetPendingTransactionsRequest(_message.Message):
    __slots__ = ("producer_group",)
    PRODUCER_GROUP_FIELD_NUMBER: _ClassVar[int]
    producer_group: str
    def __init__(self, producer_group: _Optional[str] = ...) -> None: ...

class PendingTransactionGroup(_message.Message):
    __slots__ = ("producer_group", "pending", "oldest_born_timestamp", "max_check_times", "online_producers")
    PRODUCER_GROUP_FIELD_NUMBER: _ClassVar[int]
    PENDING_FIELD_NUMBER: _ClassVar[int]
    OLDEST_BORN_TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    MAX_CHECK_TIMES_FIELD_NUMBER: _ClassVar[int]
    ONLINE_PRODUCERS_FIELD_NUMBER: _ClassVar[int]
    producer_group: str
    pending: int
    oldest_born_timestamp: int
    max_check_times: int
    online_producers: int
    def __init__(self, producer_group: _Optional[str] = ..., pending: _Optional[int] = ..., oldest_born_timestamp: _Optional[int] = ..., max_check_times: _Optional[int] = ..., online_producers: _Optional[int] = ...) -> None: ...

class GetPendingTransactionsResponse(_message.Message):
    __slots__ = ("status", "groups", "half_offset", "op_offset", "half_max_offset")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    HALF_OFFSET_FIELD_NUMBER: _ClassVar[int]
    OP_OFFSET_FIELD_NUMBER: _ClassVar[int]
    HALF_MAX_OFFSET_FIELD_NUMBER: _ClassVar[int]
    status: _common_pb2.Status
    groups: _containers.RepeatedCompositeFieldContainer[PendingTransactionGroup]
    half_offset: int
    op_offset: int
    half_max_offset: int
    def __init__(self, status: _Optional[_Union[_common_pb2.Status, _Mapping]] = ..., groups: _Optional[_Iterable[_Union[PendingTransactionGroup, _Mapping]]] = ..., half_offset: _Optional[int] = ..., op_offset: _Optional[int] = ..., half_max_offset: _Optional[int] = ...) -> None: ...
