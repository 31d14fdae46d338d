"""Checks of what brokers send the name server (issue 16): a registration is taken whole or
refused whole, with the first problem as the reason; nothing is half-applied."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable

from mqproto import common_pb2, namesrv_pb2

# TopicValidator: the characters and length of a topic name (as the broker checks them).
TOPIC_NAME_RE = re.compile(r"^[%|a-zA-Z0-9_-]+\Z")  # "$" also matches before a final newline
MAX_TOPIC_LENGTH = 127
MAX_NAME_LENGTH = 255
MAX_PERM = 0xF  # PermName: PRIORITY 8 | READ 4 | WRITE 2 | INHERIT 1
_HOST_LABEL_RE = re.compile(r"^[A-Za-z0-9_]([A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?$")


def address_problem(address: str, min_port: int = 1) -> str | None:
    """Why `address` is not HOST:PORT (an IPv4 address, [IPv6] or a host name, a port
    `min_port`-65535), or None."""
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not min_port <= int(port) <= 65535:
        return f"{address!r} is not HOST:PORT with a port {min_port}-65535"
    if host.startswith("[") and host.endswith("]"):
        try:
            ipaddress.IPv6Address(host[1:-1])
        except ValueError:
            return f"{address!r}: {host} is not an IPv6 address"
        return None
    if host.replace(".", "").isdigit():
        try:
            ipaddress.IPv4Address(host)
        except ValueError:
            return f"{address!r}: {host} is not an IPv4 address"
        return None
    labels = host.rstrip(".").split(".")
    if len(host) > 253 or not all(_HOST_LABEL_RE.match(label) for label in labels):
        return f"{address!r}: {host!r} is not a host name"
    return None


def name_problem(what: str, name: str) -> str | None:
    if not name:
        return f"{what} is empty"
    if len(name) > MAX_NAME_LENGTH:
        return f"{what} is longer than {MAX_NAME_LENGTH} characters"
    if any(ch.isspace() or not ch.isprintable() for ch in name):
        return f"{what} {name!r} has blanks or control characters"
    return None


def topic_config_problem(config: common_pb2.TopicConfig, max_queue_nums: int) -> str | None:
    topic = config.topic_name
    if not topic:
        return "a topic name is empty"
    if len(topic.encode()) > MAX_TOPIC_LENGTH or not TOPIC_NAME_RE.match(topic):
        return (f"topic {topic!r} is not a topic name ({MAX_TOPIC_LENGTH} bytes at most of "
                "[%|a-zA-Z0-9_-])")
    for what, n in (("read", config.read_queue_nums), ("write", config.write_queue_nums)):
        if not 0 <= n <= max_queue_nums:
            return (f"topic {topic}: {n} {what} queues, outside 0..{max_queue_nums} "
                    "(the name server's --max-topic-queue-nums)")
    if not 0 <= config.perm <= MAX_PERM:
        return f"topic {topic}: perm {config.perm} is not a permission (0..{MAX_PERM})"
    if config.topic_sys_flag < 0:
        return f"topic {topic}: topic_sys_flag {config.topic_sys_flag} is negative"
    return None


def header_problem(request: namesrv_pb2.RegisterBrokerRequest) -> str | None:
    """Why the broker part of a RegisterBrokerRequest cannot be taken, or None."""
    problem = (name_problem("clusterName", request.cluster_name)
               or name_problem("brokerName", request.broker_name))
    if problem is not None:
        return problem
    if request.broker_id < 0:
        return f"brokerId {request.broker_id} is negative"
    problem = address_problem(request.broker_addr)
    if problem is not None:
        return f"brokerAddr {problem}"
    if request.ha_server_addr:  # a slave serves no HA port: its own may say port 0
        problem = address_problem(request.ha_server_addr, min_port=0)
        if problem is not None:
            return f"haServerAddr {problem}"
    if request.body_omitted and (request.topic_configs or request.compressed_topic_configs):
        return "body_omitted with a topic table"
    if request.topic_configs and request.compressed_topic_configs:
        return "both topic_configs and compressed_topic_configs"
    return None


def first_topic_problem(configs: Iterable[common_pb2.TopicConfig], max_queue_nums: int,
                        seen: set[str] | None = None) -> str | None:
    """The first problem of `configs`, or None; `seen`: the topic names of the parts of the
    same table checked before (a table checked by parts), added to."""
    if seen is None:
        seen = set()
    for config in configs:
        problem = topic_config_problem(config, max_queue_nums)
        if problem is None and config.topic_name in seen:
            problem = f"topic {config.topic_name} is listed twice"
        if problem is not None:
            return problem
        seen.add(config.topic_name)
    return None
