# ruff: noqa
from . import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class TransactionType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TRANSACTION_NOT_TYPE: _ClassVar[TransactionType]
    TRANSACTION_PREPARED_TYPE: _ClassVar[TransactionType]
    TRANSACTION_COMMIT_TYPE: _ClassVar[TransactionType]
    TRANSACTION_ROLLBACK_TYPE: _ClassVar[TransactionType]

class GetMessageStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    GET_MESSAGE_STATUS_UNSPECIFIED: _ClassVar[GetMessageStatus]
    FOUND: _ClassVar[GetMessageStatus]
    NO_MATCHED_MESSAGE: _ClassVar[GetMessageStatus]
    MESSAGE_WAS_REMOVING: _ClassVar[GetMessageStatus]
    OFFSET_FOUND_NULL: _ClassVar[GetMessageStatus]
    OFFSET_OVERFLOW_BADLY: _ClassVar[GetMessageStatus]
    OFFSET_OVERFLOW_ONE: _ClassVar[GetMessageStatus]
    OFFSET_TOO_SMALL: _ClassVar[GetMessageStatus]
    NO_MATCHED_LOGIC_QUEUE: _ClassVar[GetMessageStatus]
    NO_MESSAGE_IN_QUEUE: _ClassVar[GetMessageStatus]
TRANSACTION_NOT_TYPE: TransactionType
TRANSACTION_PREPARED_TYPE: TransactionType
TRANSACTION_COMMIT_TYPE: TransactionType
TRANSACTION_ROLLBACK_TYPE: TransactionType
GET_MESSAGE_STATUS_UNSPECIFIED: GetMessageStatus
FOUND: GetMessageStatus
NO_MATCHED_MESSAGE: GetMessageStatus
MESSAGE_WAS_REMOVING: GetMessageStatus
OFFSET_FOUND_NULL: GetMessageStatus
OFFSET_OVERFLOW_BADLY: GetMessageStatus
OFFSET_OVERFLOW_ONE: GetMessageStatus
OFFSET_TOO_SMALL: GetMessageStatus
NO_MATCHED_LOGIC_QUEUE: GetMessageStatus
NO_MESSAGE_IN_QUEUE: GetMessageStatus

class SystemProperties(_message.Message):
    __slots__ = ("message_id", "offset_msg_id", "born_timestamp", "born_host", "store_timestamp", "store_host", "queue_id", "queue_offset", "commit_log_offset", "store_size", "body_crc", "sys_flag", "reconsume_times", "delay_time_level", "message_group", "transaction_type", "producer_group", "transaction_id", "prepared_transaction_offset", "real_topic", "real_queue_id", "reserved_properties")
    class ReservedPropertiesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    OFFSET_MSG_ID_FIELD_NUMBER: _ClassVar[int]
    BORN_TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    BORN_HOST_FIELD_NUMBER: _ClassVar[int]
    STORE_TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    STORE_HOST_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    QUEUE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    COMMIT_LOG_OFFSET_FIELD_NUMBER: _ClassVar[int]
    STORE_SIZE_FIELD_NUMBER: _ClassVar[int]
    BODY_CRC_FIELD_NUMBER: _ClassVar[int]
    SYS_FLAG_FIELD_NUMBER: _ClassVar[int]
    RECONSUME_TIMES_FIELD_NUMBER: _ClassVar[int]
    DELAY_TIME_LEVEL_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_GROUP_FIELD_NUMBER: _ClassVar[int]
    TRANSACTION_TYPE_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_GROUP_FIELD_NUMBER: _ClassVar[int]
    TRANSACTION_ID_FIELD_NUMBER: _ClassVar[int]
    PREPARED_TRANSACTION_OFFSET_FIELD_NUMBER: _ClassVar[int]
    REAL_TOPIC_FIELD_NUMBER: _ClassVar[int]
    REAL_QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    RESERVED_PROPERTIES_FIELD_NUMBER: _ClassVar[int]
    message_id: str
    offset_msg_id: str
    born_timestamp: int
    born_host: str
    store_timestamp: int
    store_host: str
    queue_id: int
    queue_offset: int
    commit_log_offset: int
    store_size: int
    body_crc: int
    sys_flag: int
    reconsume_times: int
    delay_time_level: int
    message_group: str
    transaction_type: TransactionType
    producer_group: str
    transaction_id: str
    prepared_transaction_offset: int
    real_topic: str
    real_queue_id: int
    reserved_properties: _containers.ScalarMap[str, str]
    def __init__(self, message_id: _Optional[str] = ..., offset_msg_id: _Optional[str] = ..., born_timestamp: _Optional[int] = ..., born_host: _Optional[str] = ..., store_timestamp: _Optional[int] = ..., store_host: _Optional[str] = ..., queue_id: _Optional[int] = ..., queue_offset: _Optional[int] = ..., commit_log_offset: _Optional[int] = ..., store_size: _Optional[int] = ..., body_crc: _Optional[int] = ..., sys_flag: _Optional[int] = ..., reconsume_times: _Optional[int] = ..., delay_time_level: _Optional[int] = ..., message_group: _Optional[str] = ..., transaction_type: _Optional[_Union[TransactionType, str]] = ..., producer_group: _Optional[str] = ..., transaction_id: _Optional[str] = ..., prepared_transaction_offset: _Optional[int] = ..., real_topic: _Optional[str] = ..., real_queue_id: _Optional[int] = ..., reserved_properties: _Optional[_Mapping[str, str]] = ...) -> None: ...

class Message(_message.Message):
    __slots__ = ("topic", "flag", "body", "tag", "keys", "user_properties", "system_properties")
    class UserPropertiesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    FLAG_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    TAG_FIELD_NUMBER: _ClassVar[int]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    USER_PROPERTIES_FIELD_NUMBER: _ClassVar[int]
    SYSTEM_PROPERTIES_FIELD_NUMBER: _ClassVar[int]
    topic: str
    flag: int
    body: bytes
    tag: str
    keys: _containers.RepeatedScalarFieldContainer[str]
    user_properties: _containers.ScalarMap[str, str]
    system_properties: SystemProperties
    def __init__(self, topic: _Optional[str] = ..., flag: _Optional[int] = ..., body: _Optional[bytes] = ..., tag: _Optional[str] = ..., keys: _Optional[_Iterable[str]] = ..., user_properties: _Optional[_Mapping[str, str]] = ..., system_properties: _Optional[_Union[SystemProperties, _Mapping]] = ...) -> None: ...

class SendMessageRequest(_message.Message):
    __slots__ = ("producer_group", "message", "queue_id", "default_topic_queue_nums", "max_reconsume_times")
    PRODUCER_GROUP_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_TOPIC_QUEUE_NUMS_FIELD_NUMBER: _ClassVar[int]
    MAX_RECONSUME_TIMES_FIELD_NUMBER: _ClassVar[int]
    producer_group: str
    message: Message
    queue_id: int
    default_topic_queue_nums: int
    max_reconsume_times: int
    def __init__(self, producer_group: _Optional[str] = ..., message: _Optional[_Union[Message, _Mapping]] = ..., queue_id: _Optional[int] = ..., default_topic_queue_nums: _Optional[int] = ..., max_reconsume_times: _Optional[int] = ...) -> None: ...

class SendResultEntry(_message.Message):
    __slots__ = ("message_id", "offset_msg_id", "queue_id", "queue_offset", "transaction_id", "commit_log_offset")
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    OFFSET_MSG_ID_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    QUEUE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    TRANSACTION_ID_FIELD_NUMBER: _ClassVar[int]
    COMMIT_LOG_OFFSET_FIELD_NUMBER: _ClassVar[int]
    message_id: str
    offset_msg_id: str
    queue_id: int
    queue_offset: int
    transaction_id: str
    commit_log_offset: int
    def __init__(self, message_id: _Optional[str] = ..., offset_msg_id: _Optional[str] = ..., queue_id: _Optional[int] = ..., queue_offset: _Optional[int] = ..., transaction_id: _Optional[str] = ..., commit_log_offset: _Optional[int] = ...) -> None: ...

class SendMessageResponse(_message.Message):
    __slots__ = ("status", "result")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    status: _common_pb2.Status
    result: SendResultEntry
    def __init__(self, status: _Optional[_Union[_common_pb2.Status, _Mapping]] = ..., result: _Optional[_Union[SendResultEntry, _Mapping]] = ...) -> None: ...

class SendBatchRequest(_message.Message):
    __slots__ = ("producer_group", "topic", "queue_id", "messages", "default_topic_queue_nums", "encoded_messages", "born_timestamp", "born_host", "sys_flags")
    PRODUCER_GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_TOPIC_QUEUE_NUMS_FIELD_NUMBER: _ClassVar[int]
    ENCODED_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    BORN_TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    BORN_HOST_FIELD_NUMBER: _ClassVar[int]
    SYS_FLAGS_FIELD_NUMBER: _ClassVar[int]
    producer_group: str
    topic: str
    queue_id: int
    messages: _containers.RepeatedCompositeFieldContainer[Message]
    default_topic_queue_nums: int
    encoded_messages: bytes
    born_timestamp: int
    born_host: str
    sys_flags: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, producer_group: _Optional[str] = ..., topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., messages: _Optional[_Iterable[_Union[Message, _Mapping]]] = ..., default_topic_queue_nums: _Optional[int] = ..., encoded_messages: _Optional[bytes] = ..., born_timestamp: _Optional[int] = ..., born_host: _Optional[str] = ..., sys_flags: _Optional[_Iterable[int]] = ...) -> None: ...

class SendBatchResponse(_message.Message):
    __slots__ = ("status", "results", "queue_id", "first_queue_offset", "commit_log_offsets", "offset_msg_id_host")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    FIRST_QUEUE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    COMMIT_LOG_OFFSETS_FIELD_NUMBER: _ClassVar[int]
    OFFSET_MSG_ID_HOST_FIELD_NUMBER: _ClassVar[int]
    status: _common_pb2.Status
    results: _containers.RepeatedCompositeFieldContainer[SendResultEntry]
    queue_id: int
    first_queue_offset: int
    commit_log_offsets: _containers.RepeatedScalarFieldContainer[int]
    offset_msg_id_host: str
    def __init__(self, status: _Optional[_Union[_common_pb2.Status, _Mapping]] = ..., results: _Optional[_Iterable[_Union[SendResultEntry, _Mapping]]] = ..., queue_id: _Optional[int] = ..., first_queue_offset: _Optional[int] = ..., commit_log_offsets: _Optional[_Iterable[int]] = ..., offset_msg_id_host: _Optional[str] = ...) -> None: ...

class SendBatchesRequest(_message.Message):
    __slots__ = ("batches",)
    BATCHES_FIELD_NUMBER: _ClassVar[int]
    batches: _containers.RepeatedCompositeFieldContainer[SendBatchRequest]
    def __init__(self, batches: _Optional[_Iterable[_Union[SendBatchRequest, _Mapping]]] = ...) -> None: ...

class SendBatchesResponse(_message.Message):
    __slots__ = ("responses",)
    RESPONSES_FIELD_NUMBER: _ClassVar[int]
    responses: _containers.RepeatedCompositeFieldContainer[SendBatchResponse]
    def __init__(self, responses: _Optional[_Iterable[_Union[SendBatchResponse, _Mapping]]] = ...) -> None: ...

class GetSendChannelRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetSendChannelResponse(_message.Message):
    __slots__ = ("status", "address")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    status: _common_pb2.Status
    address: str
    def __init__(self, status: _Optional[_Union[_common_pb2.Status, _Mapping]] = ..., address: _Optional[str] = ...) -> None: ...

class PullMessageRequest(_message.Message):
    __slots__ = ("consumer_group", "topic", "queue_id", "queue_offset", "max_msg_nums", "subscription", "suspend_timeout_millis", "commit_offset", "raw_records", "expression_type", "client_id")
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    QUEUE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_MSG_NUMS_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIPTION_FIELD_NUMBER: _ClassVar[int]
    SUSPEND_TIMEOUT_MILLIS_FIELD_NUMBER: _ClassVar[int]
    COMMIT_OFFSET_FIELD_NUMBER: _ClassVar[int]
    RAW_RECORDS_FIELD_NUMBER: _ClassVar[int]
    EXPRESSION_TYPE_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    topic: str
    queue_id: int
    queue_offset: int
    max_msg_nums: int
    subscription: str
    suspend_timeout_millis: int
    commit_offset: int
    raw_records: bool
    expression_type: str
    client_id: str
    def __init__(self, consumer_group: _Optional[str] = ..., topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., queue_offset: _Optional[int] = ..., max_msg_nums: _Optional[int] = ..., subscription: _Optional[str] = ..., suspend_timeout_millis: _Optional[int] = ..., commit_offset: _Optional[int] = ..., raw_records: _Optional[bool] = ..., expression_type: _Optional[str] = ..., client_id: _Optional[str] = ...) -> None: ...

class PullMessageResponse(_message.Message):
    __slots__ = ("status", "get_message_status", "next_begin_offset", "min_offset", "max_offset", "suggest_which_broker_id", "messages", "raw_records")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    GET_MESSAGE_STATUS_FIELD_NUMBER: _ClassVar[int]
    NEXT_BEGIN_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MIN_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_OFFSET_FIELD_NUMBER: _ClassVar[int]
    SUGGEST_WHICH_BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    RAW_RECORDS_FIELD_NUMBER: _ClassVar[int]
    status: _common_pb2.Status
    get_message_status: GetMessageStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    suggest_which_broker_id: int
    messages: _containers.RepeatedCompositeFieldContainer[Message]
    raw_records: bytes
    def __init__(self, status: _Optional[_Union[_common_pb2.Status, _Mapping]] = ..., get_message_status: _Optional[_Union[GetMessageStatus, str]] = ..., next_begin_offset: _Optional[int] = ..., min_offset: _Optional[int] = ..., max_offset: _Optional[int] = ..., suggest_which_broker_id: _Optional[int] = ..., messages: _Optional[_Iterable[_Union[Message, _Mapping]]] = ..., raw_records: _Optional[bytes] = ...) -> None: ...

class QueryMessageByIdRequest(_message.Message):
    __slots__ = ("offset_msg_id",)
    OFFSET_MSG_ID_FIELD_NUMBER: _ClassVar[int]
    offset_msg_id: str
    def __init__(self, offset_msg_id: _Optional[str] = ...) -> None: ...

class QueryMessageByIdResponse(_message.Message):
    __slots__ = ("status", "message")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    status: _common_pb2.Status
    message: Message
    def __init__(self, status: _Optional[_Union[_common_pb2.Status, _Mapping]] = ..., message: _Optional[_Union[Message, _Mapping]] = ...) -> None: ...

class QueryMessageByKeyRequest(_message.Message):
    __slots__ = ("topic", "key", "max_num", "begin_timestamp", "end_timestamp", "unique_key")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    MAX_NUM_FIELD_NUMBER: _ClassVar[int]
    BEGIN_TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    END_TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    UNIQUE_KEY_FIELD_NUMBER: _ClassVar[int]
    topic: str
    key: str
    max_num: int
    begin_timestamp: int
    end_timestamp: int
    unique_key: bool
    def __init__(self, topic: _Optional[str] = ..., key: _Optional[str] = ..., max_num: _Optional[int] = ..., begin_timestamp: _Optional[int] = ..., end_timestamp: _Optional[int] = ..., unique_key: _Optional[bool] = ...) -> None: ...

class QueryMessageByKeyResponse(_message.Message):
    __slots__ = ("status", "messages", "index_last_update_timestamp", "index_last_update_phy_offset")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    INDEX_LAST_UPDATE_TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    INDEX_LAST_UPDATE_PHY_OFFSET_FIELD_NUMBER: _ClassVar[int]
    status: _common_pb2.Status
    messages: _containers.RepeatedCompositeFieldContainer[Message]
    index_last_update_timestamp: int
    index_last_update_phy_offset: int
    def __init__(self, status: _Optional[_Union[_common_pb2.Status, _Mapping]] = ..., messages: _Optional[_Iterable[_Union[Message, _Mapping]]] = ..., index_last_update_timestamp: _Optional[int] = ..., index_last_update_phy_offset: _Optional[int] = ...) -> None: ...

class SearchOffsetByTimestampRequest(_message.Message):
    __slots__ = ("topic", "queue_id", "timestamp")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    topic: str
    queue_id: int
    timestamp: int
    def __init__(self, topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., timestamp: _Optional[int] = ...) -> None: ...

class SearchOffsetByTimestampResponse(_message.Message):
    __slots__ = ("status", "offset")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    status: _common_pb2.Status
    offset: int
    def __init__(self, status: _Optional[_Union[_common_pb2.Status, _Mapping]] = ..., offset: _Optional[int] = ...) -> None: ...

class GetMinOffsetRequest(_message.Message):
    __slots__ = ("topic", "queue_id")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    topic: str
    queue_id: int
    def __init__(self, topic: _Optional[str] = ..., queue_id: _Optional[int] = ...) -> None: ...

class GetMinOffsetResponse(_message.Message):
    __slots__ = ("status", "offset")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    status: _common_pb2.Status
    offset: int
    def __init__(self, status: _Optional[_Union[_common_pb2.Status, _Mapping]] = ..., offset: _Optional[int] = ...) -> None: ...

class GetMaxOffsetRequest(_message.Message):
    __slots__ = ("topic", "queue_id")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    topic: str
    queue_id: int
    def __init__(self, topic: _Optional[str] = ..., queue_id: _Optional[int] = ...) -> None: ...

class GetMaxOffsetResponse(_message.Message):
    __slots__ = ("status", "offset")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    status: _common_pb2.Status
    offset: int
    def __init__(self, status: _Optional[_Union[_common_pb2.Status, _Mapping]] = ..., offset: _Optional[int] = ...) -> None: ...

class UpdateConsumerOffsetRequest(_message.Message):
    __slots__ = ("consumer_group", "topic", "queue_id", "commit_offset", "client_id")
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    COMMIT_OFFSET_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    topic: str
    queue_id: int
    commit_offset: int
    client_id: str
    def __init__(self, consumer_group: _Optional[str] = ..., topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., commit_offset: _Optional[int] = ..., client_id: _Optional[str] = ...) -> None: ...

class UpdateConsumerOffsetResponse(_message.Message):
    __slots__ = ("status",)
    STATUS_FIELD_NUMBER: _ClassVar[int]
    status: _common_pb2.Status
    def __init__(self, status: _Optional[_Union[_common_pb2.Status, _Mapping]] = ...) -> None: ...

class QueryConsumerOffsetRequest(_message.Message):
    __slots__ = ("consumer_group", "topic", "queue_id")
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    topic: str
    queue_id: int
    def __init__(self, consumer_group: _Optional[str] = ..., topic: _Optional[str] = ..., queue_id: _Optional[int] = ...) -> None: ...

class QueryConsumerOffsetResponse(_message.Message):
    __slots__ = ("status", "offset")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    status: _common_pb2.Status
    offset: int
    def __init__(self, status: _Optional[_Union[_common_pb2.Status, _Mapping]] = ..., offset: _Optional[int] = ...) -> None: ...

class EndTransactionRequest(_message.Message):
    __slots__ = ("producer_group", "message_id", "transaction_id", "commit_log_offset", "tran_state_table_offset", "commit_or_rollback", "from_transaction_check")
    PRODUCER_GROUP_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    TRANSACTION_ID_FIELD_NUMBER: _ClassVar[int]
    COMMIT_LOG_OFFSET_FIELD_NUMBER: _ClassVar[int]
    TRAN_STATE_TABLE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    COMMIT_OR_ROLLBACK_FIELD_NUMBER: _ClassVar[int]
    FROM_TRANSACTION_CHECK_FIELD_NUMBER: _ClassVar[int]
    producer_group: str
    message_id: str
    transaction_id: str
    commit_log_offset: int
    tran_state_table_offset: int
    commit_or_rollback: TransactionType
    from_transaction_check: bool
    def __init__(self, producer_group: _Optional[str] = ..., message_id: _Optional[str] = ..., transaction_id: _Optional[str] = ..., commit_log_offset: _Optional[int] = ..., tran_state_table_offset: _Optional[int] = ..., commit_or_rollback: _Optional[_Union[TransactionType, str]] = ..., from_transaction_check: _Optional[bool] = ...) -> None: ...

class EndTransactionResponse(_message.Message):
    __slots__ = ("status",)
    STATUS_FIELD_NUMBER: _ClassVar[int]
    status: _common_pb2.Status
    def __init__(self, status: _Optional[_Union[_common_pb2.Status, _Mapping]] = ...) -> None: ...

class ConsumerSubscription(_message.Message):
    __slots__ = ("topic", "sub_string", "expression_type")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    SUB_STRING_FIELD_NUMBER: _ClassVar[int]
    EXPRESSION_TYPE_FIELD_NUMBER: _ClassVar[int]
    topic: str
    sub_string: str
    expression_type: str
    def __init__(self, topic: _Optional[str] = ..., sub_string: _Optional[str] = ..., expression_type: _Optional[str] = ...) -> None: ...

class HeartbeatRequest(_message.Message):
    __slots__ = ("client_id", "producer_group", "consumer_group", "subscriptions")
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_GROUP_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIPTIONS_FIELD_NUMBER: _ClassVar[int]
    client_id: str
    producer_group: str
    consumer_group: str
    subscriptions: _containers.RepeatedCompositeFieldContainer[ConsumerSubscription]
    def __init__(self, client_id: _Optional[str] = ..., producer_group: _Optional[str] = ..., consumer_group: _Optional[str] = ..., subscriptions: _Optional[_Iterable[_Union[ConsumerSubscription, _Mapping]]] = ...) -> None: ...

class HeartbeatResponse(_message.Message):
    __slots__ = ("status",)
    STATUS_FIELD_NUMBER: _ClassVar[int]
    status: _common_pb2.Status
    def __init__(self, status: _Optional[_Union[_common_pb2.Status, _Mapping]] = ...) -> None: ...

class GetConsumerListByGroupRequest(_message.Message):
    __slots__ = ("consumer_group",)
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    def __init__(self, consumer_group: _Optional[str] = ...) -> None: ...

class GetConsumerListByGroupResponse(_message.Message):
    __slots__ = ("status", "consumer_id_list")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_ID_LIST_FIELD_NUMBER: _ClassVar[int]
    status: _common_pb2.Status
    consumer_id_list: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, status: _Optional[_Union[_common_pb2.Status, _Mapping]] = ..., consumer_id_list: _Optional[_Iterable[str]] = ...) -> None: ...

class ConsumerSendMsgBackRequest(_message.Message):
    __slots__ = ("consumer_group", "commit_log_offset", "origin_message_id", "origin_topic", "delay_level", "max_reconsume_times")
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    COMMIT_LOG_OFFSET_FIELD_NUMBER: _ClassVar[int]
    ORIGIN_MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    ORIGIN_TOPIC_FIELD_NUMBER: _ClassVar[int]
    DELAY_LEVEL_FIELD_NUMBER: _ClassVar[int]
    MAX_RECONSUME_TIMES_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    commit_log_offset: int
    origin_message_id: str
    origin_topic: str
    delay_level: int
    max_reconsume_times: int
    def __init__(self, consumer_group: _Optional[str] = ..., commit_log_offset: _Optional[int] = ..., origin_message_id: _Optional[str] = ..., origin_topic: _Optional[str] = ..., delay_level: _Optional[int] = ..., max_reconsume_times: _Optional[int] = ...) -> None: ...

class ConsumerSendMsgBackResponse(_message.Message):
    __slots__ = ("status",)
    STATUS_FIELD_NUMBER: _ClassVar[int]
    status: _common_pb2.Status
    def __init__(self, status: _Optional[_Union[_common_pb2.Status, _Mapping]] = ...) -> None: ...

class MessageQueue(_message.Message):
    __slots__ = ("topic", "broker_name", "queue_id")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    topic: str
    broker_name: str
    queue_id: int
    def __init__(self, topic: _Optional[str] = ..., broker_name: _Optional[str] = ..., queue_id: _Optional[int] = ...) -> None: ...

class LockBatchMQRequest(_message.Message):
    __slots__ = ("consumer_group", "client_id", "mq_set")
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    MQ_SET_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    client_id: str
    mq_set: _containers.RepeatedCompositeFieldContainer[MessageQueue]
    def __init__(self, consumer_group: _Optional[str] = ..., client_id: _Optional[str] = ..., mq_set: _Optional[_Iterable[_Union[MessageQueue, _Mapping]]] = ...) -> None: ...

class LockBatchMQResponse(_message.Message):
    __slots__ = ("status", "lock_ok_mq_set")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    LOCK_OK_MQ_SET_FIELD_NUMBER: _ClassVar[int]
    status: _common_pb2.Status
    lock_ok_mq_set: _containers.RepeatedCompositeFieldContainer[MessageQueue]
    def __init__(self, status: _Optional[_Union[_common_pb2.Status, _Mapping]] = ..., lock_ok_mq_set: _Optional[_Iterable[_Union[MessageQueue, _Mapping]]] = ...) -> None: ...

class UnlockBatchMQRequest(_message.Message):
    __slots__ = ("consumer_group", "client_id", "mq_set")
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    MQ_SET_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    client_id: str
    mq_set: _containers.RepeatedCompositeFieldContainer[MessageQueue]
    def __init__(self, consumer_group: _Optional[str] = ..., client_id: _Optional[str] = ..., mq_set: _Optional[_Iterable[_Union[MessageQueue, _Mapping]]] = ...) -> None: ...

class UnlockBatchMQResponse(_message.Message):
    __slots__ = ("status",)
    STATUS_FIELD_NUMBER: _ClassVar[int]
    status: _common_pb2.Status
    def __init__(self, status: _Optional[_Union[_common_pb2.Status, _Mapping]] = ...) -> None: ...

class SubscribeTransactionCheckRequest(_message.Message):
    __slots__ = ("producer_group", "client_id")
    PRODUCER_GROUP_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    producer_group: str
    client_id: str
    def __init__(self, producer_group: _Optional[str] = ..., client_id: _Optional[str] = ...) -> None: ...

class CheckTransactionStateRequest(_message.Message):
    __slots__ = ("message", "tran_state_table_offset", "commit_log_offset")
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    TRAN_STATE_TABLE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    COMMIT_LOG_OFFSET_FIELD_NUMBER: _ClassVar[int]
    message: Message
    tran_state_table_offset: int
    commit_log_offset: int
    def __init__(self, message: _Optional[_Union[Message, _Mapping]] = ..., tran_state_table_offset: _Optional[int] = ..., commit_log_offset: _Optional[int] = ...) -> None: ...

class UnregisterClientRequest(_message.Message):
    __slots__ = ("client_id", "producer_group", "consumer_group")
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_GROUP_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    client_id: str
    producer_group: str
    consumer_group: str
    def __init__(self, client_id: _Optional[str] = ..., producer_group: _Optional[str] = ..., consumer_group: _Optional[str] = ...) -> None: ...

class UnregisterClientResponse(_message.Message):
    __slots__ = ("status",)
    STATUS_FIELD_NUMBER: _ClassVar[int]
    status: _common_pb2.Status
    def __init__(self, status: _Optional[_Union[_common_pb2.Status, _Mapping]] = ...) -> None: ...

class WatchConsumerGroupRequest(_message.Message):
    __slots__ = ("consumer_group", "client_id")
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    client_id: str
    def __init__(self, consumer_group: _Optional[str] = ..., client_id: _Optional[str] = ...) -> None: ...

class ConsumerGroupChanged(_message.Message):
    __slots__ = ("consumer_group", "consumer_id_list", "reset")
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_ID_LIST_FIELD_NUMBER: _ClassVar[int]
    RESET_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    consumer_id_list: _containers.RepeatedScalarFieldContainer[str]
    reset: ResetOffsetNotice
    def __init__(self, consumer_group: _Optional[str] = ..., consumer_id_list: _Optional[_Iterable[str]] = ..., reset: _Optional[_Union[ResetOffsetNotice, _Mapping]] = ...) -> None: ...

class ResetOffsetNotice(_message.Message):
    __slots__ = ("topic", "broker_name", "offsets")
    class OffsetsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: int
        def __init__(self, key: _Optional[int] = ..., value: _Optional[int] = ...) -> None: ...
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    broker_name: str
    offsets: _containers.ScalarMap[int, int]
    def __init__(self, topic: _Optional[str] = ..., broker_name: _Optional[str] = ..., offsets: _Optional[_Mapping[int, int]] = ...) -> None: ...
