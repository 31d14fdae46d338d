# ruff: noqa
from . import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class WatchBrokerLinkRequest(_message.Message):
    __slots__ = ("broker_addr",)
    BROKER_ADDR_FIELD_NUMBER: _ClassVar[int]
    broker_addr: str
    def __init__(self, broker_addr: _Optional[str] = ...) -> None: ...

class BrokerLinkEvent(_message.Message):
    __slots__ = ("status", "master_addr", "ha_server_addr")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    MASTER_ADDR_FIELD_NUMBER: _ClassVar[int]
    HA_SERVER_ADDR_FIELD_NUMBER: _ClassVar[int]
    status: _common_pb2.Status
    master_addr: str
    ha_server_addr: str
    def __init__(self, status: _Optional[_Union[_common_pb2.Status, _Mapping]] = ..., master_addr: _Optional[str] = ..., ha_server_addr: _Optional[str] = ...) -> None: ...

class RegisterBrokerRequest(_message.Message):
    __slots__ = ("cluster_name", "broker_name", "broker_addr", "broker_id", "ha_server_addr", "data_version", "topic_configs", "compressed_topic_configs", "body_omitted", "remoting_addr")
    CLUSTER_NAME_FIELD_NUMBER: _ClassVar[int]
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    BROKER_ADDR_FIELD_NUMBER: _ClassVar[int]
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    HA_SERVER_ADDR_FIELD_NUMBER: _ClassVar[int]
    DATA_VERSION_FIELD_NUMBER: _ClassVar[int]
    TOPIC_CONFIGS_FIELD_NUMBER: _ClassVar[int]
    COMPRESSED_TOPIC_CONFIGS_FIELD_NUMBER: _ClassVar[int]
    BODY_OMITTED_FIELD_NUMBER: _ClassVar[int]
    REMOTING_ADDR_FIELD_NUMBER: _ClassVar[int]
    cluster_name: str
    broker_name: str
    broker_addr: str
    broker_id: int
    ha_server_addr: str
    data_version: _common_pb2.DataVersion
    topic_configs: _containers.RepeatedCompositeFieldContainer[_common_pb2.TopicConfig]
    compressed_topic_configs: bytes
    body_omitted: bool
    remoting_addr: str
    def __init__(self, cluster_name: _Optional[str] = ..., broker_name: _Optional[str] = ..., broker_addr: _Optional[str] = ..., broker_id: _Optional[int] = ..., ha_server_addr: _Optional[str] = ..., data_version: _Optional[_Union[_common_pb2.DataVersion, _Mapping]] = ..., topic_configs: _Optional[_Iterable[_Union[_common_pb2.TopicConfig, _Mapping]]] = ..., compressed_topic_configs: _Optional[bytes] = ..., body_omitted: _Optional[bool] = ..., remoting_addr: _Optional[str] = ...) -> None: ...

class TopicConfigTable(_message.Message):
    __slots__ = ("topic_configs",)
    TOPIC_CONFIGS_FIELD_NUMBER: _ClassVar[int]
    topic_configs: _containers.RepeatedCompositeFieldContainer[_common_pb2.TopicConfig]
    def __init__(self, topic_configs: _Optional[_Iterable[_Union[_common_pb2.TopicConfig, _Mapping]]] = ...) -> None: ...

class RegisterBrokerResponse(_message.Message):
    __slots__ = ("status", "master_addr", "ha_server_addr", "body_required")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    MASTER_ADDR_FIELD_NUMBER: _ClassVar[int]
    HA_SERVER_ADDR_FIELD_NUMBER: _ClassVar[int]
    BODY_REQUIRED_FIELD_NUMBER: _ClassVar[int]
    status: _common_pb2.Status
    master_addr: str
    ha_server_addr: str
    body_required: bool
    def __init__(self, status: _Optional[_Union[_common_pb2.Status, _Mapping]] = ..., master_addr: _Optional[str] = ..., ha_server_addr: _Optional[str] = ..., body_required: _Optional[bool] = ...) -> None: ...

class UnregisterBrokerRequest(_message.Message):
    __slots__ = ("cluster_name", "broker_name", "broker_addr", "broker_id")
    CLUSTER_NAME_FIELD_NUMBER: _ClassVar[int]
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    BROKER_ADDR_FIELD_NUMBER: _ClassVar[int]
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    cluster_name: str
    broker_name: str
    broker_addr: str
    broker_id: int
    def __init__(self, cluster_name: _Optional[str] = ..., broker_name: _Optional[str] = ..., broker_addr: _Optional[str] = ..., broker_id: _Optional[int] = ...) -> None: ...

class UnregisterBrokerResponse(_message.Message):
    __slots__ = ("status",)
    STATUS_FIELD_NUMBER: _ClassVar[int]
    status: _common_pb2.Status
    def __init__(self, status: _Optional[_Union[_common_pb2.Status, _Mapping]] = ...) -> None: ...

class GetRouteInfoByTopicRequest(_message.Message):
    __slots__ = ("topic",)
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    topic: str
    def __init__(self, topic: _Optional[str] = ...) -> None: ...

class GetRouteInfoByTopicsRequest(_message.Message):
    __slots__ = ("topics",)
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, topics: _Optional[_Iterable[str]] = ...) -> None: ...

class TopicQueueDatas(_message.Message):
    __slots__ = ("topic", "queue_datas")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_DATAS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    queue_datas: _containers.RepeatedCompositeFieldContainer[_common_pb2.QueueData]
    def __init__(self, topic: _Optional[str] = ..., queue_datas: _Optional[_Iterable[_Union[_common_pb2.QueueData, _Mapping]]] = ...) -> None: ...

class GetRouteInfoByTopicsResponse(_message.Message):
    __slots__ = ("status", "routes", "broker_datas")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    ROUTES_FIELD_NUMBER: _ClassVar[int]
    BROKER_DATAS_FIELD_NUMBER: _ClassVar[int]
    status: _common_pb2.Status
    routes: _containers.RepeatedCompositeFieldContainer[TopicQueueDatas]
    broker_datas: _containers.RepeatedCompositeFieldContainer[_common_pb2.BrokerData]
    def __init__(self, status: _Optional[_Union[_common_pb2.Status, _Mapping]] = ..., routes: _Optional[_Iterable[_Union[TopicQueueDatas, _Mapping]]] = ..., broker_datas: _Optional[_Iterable[_Union[_common_pb2.BrokerData, _Mapping]]] = ...) -> None: ...

class TopicRouteData(_message.Message):
    __slots__ = ("queue_datas", "broker_datas")
    QUEUE_DATAS_FIELD_NUMBER: _ClassVar[int]
    BROKER_DATAS_FIELD_NUMBER: _ClassVar[int]
    queue_datas: _containers.RepeatedCompositeFieldContainer[_common_pb2.QueueData]
    broker_datas: _containers.RepeatedCompositeFieldContainer[_common_pb2.BrokerData]
    def __init__(self, queue_datas: _Optional[_Iterable[_Union[_common_pb2.QueueData, _Mapping]]] = ..., broker_datas: _Optional[_Iterable[_Union[_common_pb2.BrokerData, _Mapping]]] = ...) -> None: ...

class GetRouteInfoByTopicResponse(_message.Message):
    __slots__ = ("status", "topic_route_data")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    TOPIC_ROUTE_DATA_FIELD_NUMBER: _ClassVar[int]
    status: _common_pb2.Status
    topic_route_data: TopicRouteData
    def __init__(self, status: _Optional[_Union[_common_pb2.Status, _Mapping]] = ..., topic_route_data: _Optional[_Union[TopicRouteData, _Mapping]] = ...) -> None: ...

class GetClusterInfoRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class BrokerNameSet(_message.Message):
    __slots__ = ("broker_names",)
    BROKER_NAMES_FIELD_NUMBER: _ClassVar[int]
    broker_names: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, broker_names: _Optional[_Iterable[str]] = ...) -> None: ...

class ClusterInfo(_message.Message):
    __slots__ = ("broker_addr_table", "cluster_addr_table")
    class BrokerAddrTableEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: _common_pb2.BrokerData
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[_common_pb2.BrokerData, _Mapping]] = ...) -> None: ...
    class ClusterAddrTableEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: BrokerNameSet
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[BrokerNameSet, _Mapping]] = ...) -> None: ...
    BROKER_ADDR_TABLE_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_ADDR_TABLE_FIELD_NUMBER: _ClassVar[int]
    broker_addr_table: _containers.MessageMap[str, _common_pb2.BrokerData]
    cluster_addr_table: _containers.MessageMap[str, BrokerNameSet]
    def __init__(self, broker_addr_table: _Optional[_Mapping[str, _common_pb2.BrokerData]] = ..., cluster_addr_table: _Optional[_Mapping[str, BrokerNameSet]] = ...) -> None: ...

class GetClusterInfoResponse(_message.Message):
    __slots__ = ("status", "cluster_info")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_INFO_FIELD_NUMBER: _ClassVar[int]
    status: _common_pb2.Status
    cluster_info: ClusterInfo
    def __init__(self, status: _Optional[_Union[_common_pb2.Status, _Mapping]] = ..., cluster_info: _Optional[_Union[ClusterInfo, _Mapping]] = ...) -> None: ...

class GetAllTopicListRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetAllTopicListResponse(_message.Message):
    __slots__ = ("status", "topic_list")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    TOPIC_LIST_FIELD_NUMBER: _ClassVar[int]
    status: _common_pb2.Status
    topic_list: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, status: _Optional[_Union[_common_pb2.Status, _Mapping]] = ..., topic_list: _Optional[_Iterable[str]] = ...) -> None: ...
