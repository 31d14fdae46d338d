# ruff: noqa
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ResponseCode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RESPONSE_CODE_UNSPECIFIED: _ClassVar[ResponseCode]
    SUCCESS: _ClassVar[ResponseCode]
    SYSTEM_ERROR: _ClassVar[ResponseCode]
    SYSTEM_BUSY: _ClassVar[ResponseCode]
    REQUEST_CODE_NOT_SUPPORTED: _ClassVar[ResponseCode]
    INVALID_PARAMETER: _ClassVar[ResponseCode]
    NO_PERMISSION: _ClassVar[ResponseCode]
    FLUSH_DISK_TIMEOUT: _ClassVar[ResponseCode]
    FLUSH_SLAVE_TIMEOUT: _ClassVar[ResponseCode]
    SLAVE_NOT_AVAILABLE: _ClassVar[ResponseCode]
    SERVICE_NOT_AVAILABLE: _ClassVar[ResponseCode]
    CREATE_MAPPED_FILE_FAILED: _ClassVar[ResponseCode]
    MESSAGE_ILLEGAL: _ClassVar[ResponseCode]
    PROPERTIES_SIZE_EXCEEDED: _ClassVar[ResponseCode]
    OS_PAGECACHE_BUSY: _ClassVar[ResponseCode]
    UNKNOWN_ERROR: _ClassVar[ResponseCode]
    TOPIC_NOT_EXIST: _ClassVar[ResponseCode]
    TOPIC_EXIST_ALREADY: _ClassVar[ResponseCode]
    SUBSCRIPTION_GROUP_NOT_EXIST: _ClassVar[ResponseCode]
    SUBSCRIPTION_PARSE_FAILED: _ClassVar[ResponseCode]
    NO_NEW_MSG: _ClassVar[ResponseCode]
    NO_MATCHED_MSG: _ClassVar[ResponseCode]
    OFFSET_ILLEGAL: _ClassVar[ResponseCode]
    QUERY_NOT_FOUND: _ClassVar[ResponseCode]
    TRANSACTION_FAILED: _ClassVar[ResponseCode]
    CONSUMER_NOT_ONLINE: _ClassVar[ResponseCode]
    CONSUMER_ONLINE: _ClassVar[ResponseCode]
RESPONSE_CODE_UNSPECIFIED: ResponseCode
SUCCESS: ResponseCode
SYSTEM_ERROR: ResponseCode
SYSTEM_BUSY: ResponseCode
REQUEST_CODE_NOT_SUPPORTED: ResponseCode
INVALID_PARAMETER: ResponseCode
NO_PERMISSION: ResponseCode
FLUSH_DISK_TIMEOUT: ResponseCode
FLUSH_SLAVE_TIMEOUT: ResponseCode
SLAVE_NOT_AVAILABLE: ResponseCode
SERVICE_NOT_AVAILABLE: ResponseCode
CREATE_MAPPED_FILE_FAILED: ResponseCode
MESSAGE_ILLEGAL: ResponseCode
PROPERTIES_SIZE_EXCEEDED: ResponseCode
OS_PAGECACHE_BUSY: ResponseCode
UNKNOWN_ERROR: ResponseCode
TOPIC_NOT_EXIST: ResponseCode
TOPIC_EXIST_ALREADY: ResponseCode
SUBSCRIPTION_GROUP_NOT_EXIST: ResponseCode
SUBSCRIPTION_PARSE_FAILED: ResponseCode
NO_NEW_MSG: ResponseCode
NO_MATCHED_MSG: ResponseCode
OFFSET_ILLEGAL: ResponseCode
QUERY_NOT_FOUND: ResponseCode
TRANSACTION_FAILED: ResponseCode
CONSUMER_NOT_ONLINE: ResponseCode
CONSUMER_ONLINE: ResponseCode

class Status(_message.Message):
    __slots__ = ("code", "remark")
    CODE_FIELD_NUMBER: _ClassVar[int]
    REMARK_FIELD_NUMBER: _ClassVar[int]
    code: ResponseCode
    remark: str
    def __init__(self, code: _Optional[_Union[ResponseCode, str]] = ..., remark: _Optional[str] = ...) -> None: ...

class DataVersion(_message.Message):
    __slots__ = ("timestamp", "counter")
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    COUNTER_FIELD_NUMBER: _ClassVar[int]
    timestamp: int
    counter: int
    def __init__(self, timestamp: _Optional[int] = ..., counter: _Optional[int] = ...) -> None: ...

class TopicConfig(_message.Message):
    __slots__ = ("topic_name", "read_queue_nums", "write_queue_nums", "perm", "topic_sys_flag", "order")
    TOPIC_NAME_FIELD_NUMBER: _ClassVar[int]
    READ_QUEUE_NUMS_FIELD_NUMBER: _ClassVar[int]
    WRITE_QUEUE_NUMS_FIELD_NUMBER: _ClassVar[int]
    PERM_FIELD_NUMBER: _ClassVar[int]
    TOPIC_SYS_FLAG_FIELD_NUMBER: _ClassVar[int]
    ORDER_FIELD_NUMBER: _ClassVar[int]
    topic_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_sys_flag: int
    order: bool
    def __init__(self, topic_name: _Optional[str] = ..., read_queue_nums: _Optional[int] = ..., write_queue_nums: _Optional[int] = ..., perm: _Optional[int] = ..., topic_sys_flag: _Optional[int] = ..., order: _Optional[bool] = ...) -> None: ...

class QueueData(_message.Message):
    __slots__ = ("broker_name", "read_queue_nums", "write_queue_nums", "perm", "topic_sys_flag")
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    READ_QUEUE_NUMS_FIELD_NUMBER: _ClassVar[int]
    WRITE_QUEUE_NUMS_FIELD_NUMBER: _ClassVar[int]
    PERM_FIELD_NUMBER: _ClassVar[int]
    TOPIC_SYS_FLAG_FIELD_NUMBER: _ClassVar[int]
    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_sys_flag: int
    def __init__(self, broker_name: _Optional[str] = ..., read_queue_nums: _Optional[int] = ..., write_queue_nums: _Optional[int] = ..., perm: _Optional[int] = ..., topic_sys_flag: _Optional[int] = ...) -> None: ...

class BrokerData(_message.Message):
    __slots__ = ("cluster", "broker_name", "broker_addrs")
    class BrokerAddrsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: str
        def __init__(self, key: _Optional[int] = ..., value: _Optional[str] = ...) -> None: ...
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    BROKER_ADDRS_FIELD_NUMBER: _ClassVar[int]
    cluster: str
    broker_name: str
    broker_addrs: _containers.ScalarMap[int, str]
    def __init__(self, cluster: _Optional[str] = ..., broker_name: _Optional[str] = ..., broker_addrs: _Optional[_Mapping[int, str]] = ...) -> None: ...
