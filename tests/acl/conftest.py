"""Fixtures of the access-control tests: an account file and a broker (in this process)
with aclEnable, stopped in the finalizer."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.brokers import BrokerThread, broker_props

CLUSTER_KEY = "cluster-secret-key"

ACCOUNTS: dict[str, Any] = {
    "globalWhiteRemoteAddresses": ["127.0.0.1", "::1"],
    "accounts": [
        {"accessKey": "admin", "secretKey": "admin-secret", "admin": True,
         "defaultTopicPerm": "PUB|SUB", "defaultGroupPerm": "SUB"},
        {"accessKey": "producer", "secretKey": "producer-secret",
         "defaultTopicPerm": "DENY", "defaultGroupPerm": "DENY",
         "topicPerms": ["orders=PUB", "both=PUB|SUB", "secret=DENY"]},
        {"accessKey": "consumer", "secretKey": "consumer-secret",
         "defaultTopicPerm": "DENY", "defaultGroupPerm": "DENY",
         "topicPerms": ["orders=SUB", "both=PUB|SUB"], "groupPerms": ["billing=SUB"]},
    ],
}


def write_accounts(path: Path, data: dict[str, Any] | None = None) -> Path:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data if data is not None else ACCOUNTS))
    tmp.replace(path)
    return path


@pytest.fixture
def acl_file(tmp_path: Path) -> Path:
    return write_accounts(tmp_path / "plain_acl.json")


@pytest.fixture
def acl_broker(tmp_path: Path, acl_file: Path) -> Iterator[Callable[..., BrokerThread]]:
    started: list[BrokerThread] = []

    def start(**props: object) -> BrokerThread:
        b = BrokerThread(broker_props(tmp_path / f"store{len(started)}", aclEnable=True,
                                      aclFile=acl_file, clusterKey=CLUSTER_KEY, **props))
        started.append(b)
        return b

    yield start
    for b in started:
        b.stop()


KEYS = {a["accessKey"]: a["secretKey"] for a in ACCOUNTS["accounts"]}
