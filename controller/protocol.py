"""The controller's wire protocol: gRPC unary calls whose messages are JSON objects
(service `mqcluster.controller.v1.Controller`), so that brokers, mqadmin and other
controllers need no generated code. Methods and fields follow RocketMQ 5's controller
requests (RequestCode 1001-1013, BROKER_HEARTBEAT).

Every answer has `code` ("" = success, else a controller/state.py code or NOT_LEADER) and
`remark`; NOT_LEADER answers carry `leader`, the active controller's address ("" when none
is known), for the caller to go there.
"""

from __future__ import annotations

import json
from typing import Any

SERVICE = "mqcluster.controller.v1.Controller"

REGISTER = "RegisterBroker"
HEARTBEAT = "BrokerHeartbeat"
ELECT_MASTER = "ElectMaster"
ALTER_SYNC_STATE_SET = "AlterSyncStateSet"
GET_REPLICA_INFO = "GetReplicaInfo"
GET_METADATA = "GetMetadata"
GET_SYNC_STATE_DATA = "GetSyncStateData"
CLEAN_BROKER_DATA = "CleanBrokerData"
METHODS = (REGISTER, HEARTBEAT, ELECT_MASTER, ALTER_SYNC_STATE_SET, GET_REPLICA_INFO,
           GET_METADATA, GET_SYNC_STATE_DATA, CLEAN_BROKER_DATA)

NOT_LEADER = "NOT_LEADER"
ETCD_UNAVAILABLE = "ETCD_UNAVAILABLE"


def encode(message: dict[str, Any]) -> bytes:
    return json.dumps(message, separators=(",", ":")).encode()


def decode(raw: bytes) -> dict[str, Any]:
    """A request or answer; an empty dict for bytes that are not a JSON object (the
    handler then answers INVALID_REQUEST naming the missing fields)."""
    try:
        value = json.loads(raw) if raw else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def method_path(method: str) -> str:
    return f"/{SERVICE}/{method}"
