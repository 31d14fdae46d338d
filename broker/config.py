"""Broker configuration: RocketMQ's broker.conf (Java properties) with its key names.

One file configures both the broker (BrokerConfig, here) and its store (StoreConfig, read
by store.config from the same keys). Keys neither knows are reported so that a typo does
not pass silently.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import logging
import os
import re
import socket
from pathlib import Path
from typing import Any

from broker.constants import (
    DEFAULT_CLUSTER_NAME,
    DEFAULT_GRPC_PROXY_MAX_DELIVERY_ATTEMPTS,
    DEFAULT_LISTEN_PORT,
    DEFAULT_MAX_TOPIC_QUEUE_NUMS,
    DEFAULT_SEND_CHANNEL_FRAME_TIMEOUT_MS,
    DEFAULT_SEND_CHANNEL_IDLE_MS,
    DEFAULT_SEND_CHANNEL_MAX_CONNECTIONS,
    DEFAULT_TOPIC_QUEUE_NUMS,
    FLUSH_CONSUMER_OFFSET_INTERVAL_MS,
    FLUSH_DELAY_OFFSET_INTERVAL_MS,
    REGISTER_BROKER_TIMEOUT_MS,
    REGISTER_NAME_SERVER_PERIOD_MS,
    SLAVE_SYNCHRONIZE_INTERVAL_MS,
    TRANSACTION_CHECK_INTERVAL_MS,
    TRANSACTION_CHECK_MAX,
    TRANSACTION_TIME_OUT_MS,
)
from common.constants import MASTER_ID, PERM_READ_WRITE, TOPIC_PATTERN
from ha.constants import (
    HA_HOUSEKEEPING_INTERVAL,
    HA_MAX_TIME_SLAVE_NOT_CATCHUP,
    HA_SLAVE_FALLBEHIND_MAX,
)
from remoting.local_address import local_ip  # noqa: F401  (brokerIP1's default)
from store.config import StoreConfig, snake_case
from store.constants import BrokerRole

log = logging.getLogger(__name__)


class ConfigError(ValueError):
    """broker.conf cannot be used as it is; the message says which key and why."""


@dataclasses.dataclass
class BrokerConfig:
    broker_cluster_name: str = DEFAULT_CLUSTER_NAME
    broker_name: str = dataclasses.field(default_factory=socket.gethostname)
    broker_id: int = MASTER_ID
    # Name server addresses, `;`-separated in broker.conf (env NAMESRV_ADDR when absent).
    namesrv_addr: str = ""
    # 0 = any free port (tests); the bound port is what registers and goes into msgIds.
    listen_port: int = DEFAULT_LISTEN_PORT
    bind_address: str = "0.0.0.0"  # NettyServerConfig.bindAddress: the interface to serve on
    # -1 (unset) = listenPort + 1, or a free port when listenPort is 0; 0 = a free port.
    ha_listen_port: int = -1
    # The send channel (send_channel.py): -1 (unset) = listenPort + 2, or a free port when
    # listenPort is 0; 0 = a free port. sendChannelEnable=false: gRPC sends only.
    send_listen_port: int = -1
    send_channel_enable: bool = True
    # RocketMQ 5's gRPC endpoint (apache.rocketmq.v2.MessagingService, package proxy/):
    # -1 (unset) = listenPort + 3, or a free port when listenPort is 0; 0 = off.
    grpc_proxy_port: int = -1
    # RocketMQ 4.x clients (remoting, broker/remoting4x/): -1 (unset) = listenPort + 4, or a
    # free port when listenPort is 0; 0 = a free port. Registered with the name servers,
    # whose routes give 4.x clients this address. remotingEnable=false: no such port.
    remoting_port: int = -1
    remoting_enable: bool = True
    # A message received through v2 and never acked is delivered at most this many times,
    # then moved to %DLQ%{group}.
    grpc_proxy_max_delivery_attempts: int = DEFAULT_GRPC_PROXY_MAX_DELIVERY_ATTEMPTS
    # Send channel limits (broker/send_channel.py): connections, idle and frame timeouts.
    send_channel_max_connections: int = DEFAULT_SEND_CHANNEL_MAX_CONNECTIONS
    send_channel_idle_timeout_mills: int = DEFAULT_SEND_CHANNEL_IDLE_MS
    send_channel_frame_timeout_mills: int = DEFAULT_SEND_CHANNEL_FRAME_TIMEOUT_MS
    # SLAVE: the master's HA address HOST:PORT; empty = the one the name servers answer.
    ha_master_address: str = ""
    # Prometheus `/metrics` (broker/metrics.py) on this port of bindAddress: 0 = off (the
    # default, as RocketMQ's metricsExporterType=DISABLE: the endpoint has no access control
    # and a port derived from listenPort could be a neighbour's); -1 = any free port (tests;
    # GetRuntimeInfo's metricsAddr says which). RocketMQ's metricsPromExporterPort is 5557.
    metrics_port: int = 0
    # SYNC_MASTER: a slave further behind than this (bytes) is not available.
    ha_slave_fallbehind_max: int = HA_SLAVE_FALLBEHIND_MAX
    # SYNC_MASTER: a slave whose last ack is older than this (ms) is not in sync.
    ha_max_time_slave_not_catchup: int = HA_MAX_TIME_SLAVE_NOT_CATCHUP
    # Either end drops an HA link silent this long (ms).
    ha_housekeeping_interval: int = HA_HOUSEKEEPING_INTERVAL
    # The address clients reach; empty = this host's address towards the name servers.
    broker_ip1: str = ""
    # The address the group's slaves reach this broker by (its HA address, and a slave's
    # calls to its master's admin service): RocketMQ's brokerIP2. Empty = brokerIP1. In
    # Docker, brokerIP1 is what the host's clients dial and brokerIP2 the container's name.
    broker_ip2: str = ""
    broker_permission: int = PERM_READ_WRITE
    auto_create_topic_enable: bool = True
    default_topic_queue_nums: int = DEFAULT_TOPIC_QUEUE_NUMS
    # The most read or write queues a topic may have here (CreateOrUpdateTopic refuses more).
    max_topic_queue_nums: int = DEFAULT_MAX_TOPIC_QUEUE_NUMS
    cluster_topic_enable: bool = True
    broker_topic_enable: bool = True
    # Message trace: the broker creates the trace topic (1 queue, as RocketMQ's
    # TopicConfigManager) that clients with enable_msg_trace write their records to.
    trace_topic_enable: bool = False
    msg_trace_topic_name: str = "RMQ_SYS_TRACE_TOPIC"
    slave_read_enable: bool = False
    register_name_server_period: int = REGISTER_NAME_SERVER_PERIOD_MS
    register_broker_timeout_mills: int = REGISTER_BROKER_TIMEOUT_MS
    flush_consumer_offset_interval: int = FLUSH_CONSUMER_OFFSET_INTERVAL_MS
    flush_delay_offset_interval: int = FLUSH_DELAY_OFFSET_INTERVAL_MS
    # SLAVE: copy topic configs and offsets from the master this often (ms).
    slave_synchronize_interval: int = SLAVE_SYNCHRONIZE_INTERVAL_MS
    # SQL92 subscriptions (filter/, broker/message_filter.py): refused unless true.
    enable_property_filter: bool = False
    # Transactions (SPEC §7): a half message with no outcome this long (ms) after it was
    # born is checked back with its producer group, every transactionCheckInterval (ms), at
    # most transactionCheckMax times, then rolled back.
    transaction_time_out: int = TRANSACTION_TIME_OUT_MS
    transaction_check_interval: int = TRANSACTION_CHECK_INTERVAL_MS
    transaction_check_max: int = TRANSACTION_CHECK_MAX
    # Access control (acl/, issue 22): off by default, as RocketMQ's aclEnable. When on,
    # every gRPC request must be signed by an account of aclFile (plain_acl.yml layout,
    # YAML or JSON, reloaded when it changes), and a send channel connection authenticates
    # first (its AUTH frame), each batch then checked for its topic.
    acl_enable: bool = False
    acl_file: str = ""
    # A secret shared by the cluster's brokers and name servers (env MQ_CLUSTER_KEY when
    # absent): registrations with the name servers and slaves' HA links must prove it, and
    # with aclEnable a slave calls its master's admin service with it. Empty: none.
    cluster_key: str = ""
    # TLS (remoting/tls.py) on the gRPC and HA ports; the broker then dials name servers and
    # its master with TLS too (verified against tlsCaPath; empty: the system's CAs). With
    # tlsMutual, clients must show a certificate signed by tlsCaPath. The send channel is
    # served with TLS too (the same certificate).
    tls_enable: bool = False
    tls_cert_path: str = ""
    tls_key_path: str = ""
    tls_ca_path: str = ""
    tls_mutual: bool = False
    # Controller mode (issue 34, RocketMQ 5's enableControllerMode): the group's master is
    # elected by the controllers at controllerAddr (HOST:PORT;HOST:PORT). brokerId is then
    # this broker's replica id (>= 1, unique in its group), brokerRole the role it takes
    # when elected master (SLAVE reads as SYNC_MASTER); it starts as a slave.
    enable_controller_mode: bool = False
    controller_addr: str = ""
    # How often (ms) it heartbeats to the controller and learns its role from the answer.
    broker_heartbeat_interval: int = 300
    # As master (SYNC_MASTER): a send is acknowledged only once every SyncStateSet member
    # has it, not the first (RocketMQ 5's allAckInSyncStateSet).
    all_ack_in_sync_state_set: bool = False
    # Among candidates of equal epoch and max offset, the lower priority wins.
    broker_election_priority: int = 2**31 - 1
    # Only for the store; kept here so the broker can report them.
    broker_role: BrokerRole = BrokerRole.ASYNC_MASTER
    # Controller mode: the replica id (brokerId as configured) and the role it takes as master.
    replica_id: int = dataclasses.field(default=0, init=False)
    controller_master_role: BrokerRole = dataclasses.field(default=BrokerRole.SYNC_MASTER,
                                                           init=False)

    @property
    def namesrv_addr_list(self) -> list[str]:
        return [a.strip() for a in self.namesrv_addr.split(";") if a.strip()]

    @property
    def is_slave(self) -> bool:
        return self.broker_role is BrokerRole.SLAVE


@dataclasses.dataclass
class LoadedConfig:
    broker: BrokerConfig
    store: StoreConfig
    unknown_keys: list[str]
    # Of IDENTITY_KEYS, those not given (a broker.conf of its own sets both): startup warns.
    defaulted_keys: list[str] = dataclasses.field(default_factory=list)


# The keys a broker cannot sensibly default: without brokerName it takes the host's name,
# without a name server address nobody finds it. A broker.conf that sets neither (read as
# Java properties, a file of another format or of misspelt keys gives only unknown keys) is
# refused rather than booted on defaults.
IDENTITY_KEYS = {"brokerName": "brokerName=NAME (else this host's name)",
                 "namesrvAddr": "namesrvAddr=HOST:PORT;HOST:PORT, -n or $NAMESRV_ADDR (else "
                                "no name server knows the broker and no client finds it)"}


def identity_problem(loaded: LoadedConfig, path: str | os.PathLike[str]) -> str | None:
    """Why the broker must not start on this config (it sets none of IDENTITY_KEYS), or
    None."""
    if len(loaded.defaulted_keys) < len(IDENTITY_KEYS):
        return None
    unknown = (f"; its unknown keys: {', '.join(loaded.unknown_keys)} (key names are "
               "case-sensitive, as RocketMQ's)" if loaded.unknown_keys else "")
    return (f"{path} sets none of the keys a broker cannot default, so it does not start: "
            + "; ".join(IDENTITY_KEYS.values()) + unknown)


def read_properties(text: str) -> dict[str, str]:
    """Java properties: `key=value`, `key: value` or `key value`; `#`/`!` comments;
    a trailing backslash continues the line. Later keys win."""
    props: dict[str, str] = {}
    pending = ""
    for raw in text.splitlines():
        line = pending + raw.strip()
        pending = ""
        if not line or line[0] in "#!":
            continue
        if line.endswith("\\") and not line.endswith("\\\\"):
            pending = line[:-1]
            continue
        key, value = _split_property(line)
        props[key] = value
    if pending:
        key, value = _split_property(pending)
        props[key] = value
    return props


def _split_property(line: str) -> tuple[str, str]:
    """The key ends at the first `=`, `:` or blank; blanks and one `=`/`:` follow it."""
    cut = next((i for i, ch in enumerate(line) if ch in "=: \t"), len(line))
    rest = line[cut:].lstrip(" \t")
    if rest[:1] in ("=", ":"):
        rest = rest[1:]
    return line[:cut], rest.strip()


_BROKER_FIELDS = {f.name: f for f in dataclasses.fields(BrokerConfig) if f.init}
_STORE_FIELDS = {f.name for f in dataclasses.fields(StoreConfig) if f.init}


def _convert(key: str, type_name: Any, raw: str) -> Any:
    t = str(type_name)
    if t == "bool":
        if raw.lower() not in ("true", "false"):
            raise ConfigError(f"{key}: expected true or false, got {raw!r}")
        return raw.lower() == "true"
    if t == "int":
        try:
            return int(raw)
        except ValueError:
            raise ConfigError(f"{key}: expected an integer, got {raw!r}") from None
    if t == "BrokerRole":
        try:
            return BrokerRole(raw)
        except ValueError:
            raise ConfigError(f"{key}: expected one of "
                              f"{', '.join(r.value for r in BrokerRole)}, got {raw!r}") from None
    return raw


def parse_config(props: dict[str, str], env: dict[str, str] | None = None) -> LoadedConfig:
    """BrokerConfig + StoreConfig from broker.conf keys; ConfigError when a value is bad."""
    env = dict(os.environ) if env is None else env
    values: dict[str, Any] = {}
    unknown: list[str] = []
    for key, raw in props.items():
        name = snake_case(key)
        field = _BROKER_FIELDS.get(name)
        if field is not None:
            values[name] = _convert(key, field.type, raw)
        elif name not in _STORE_FIELDS:
            unknown.append(key)
    if "namesrv_addr" not in values and env.get("NAMESRV_ADDR"):
        values["namesrv_addr"] = env["NAMESRV_ADDR"]
    if "cluster_key" not in values and env.get("MQ_CLUSTER_KEY"):
        values["cluster_key"] = env["MQ_CLUSTER_KEY"]
    broker = BrokerConfig(**values)
    _check(broker)
    try:
        store = StoreConfig.from_properties(props)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    broker.broker_role = store.broker_role
    if broker.enable_controller_mode:
        _controller_mode(broker, store)
    elif store.broker_role is BrokerRole.SLAVE:
        if broker.broker_id <= MASTER_ID:
            raise ConfigError("brokerId: a SLAVE's brokerId must be > 0")
    elif broker.broker_id != MASTER_ID:
        log.warning("brokerId %d ignored: a %s is brokerId 0", broker.broker_id,
                    store.broker_role.value)
        broker.broker_id = MASTER_ID
    return LoadedConfig(broker, store, unknown)


def _controller_mode(broker: BrokerConfig, store: StoreConfig) -> None:
    """A broker in controller mode starts as a slave; the controller makes it master."""
    if not broker.controller_addr.strip():
        raise ConfigError("controllerAddr: enableControllerMode=true needs the controllers' "
                          "addresses (HOST:PORT;HOST:PORT)")
    for addr in broker.controller_addr.replace(",", ";").split(";"):
        host, sep, port = addr.strip().rpartition(":")
        if addr.strip() and (not sep or not host or not port.isdigit()):
            raise ConfigError(f"controllerAddr: expected HOST:PORT;HOST:PORT, got {addr!r}")
    if broker.broker_id <= MASTER_ID:
        raise ConfigError("brokerId: in controller mode each broker of a group has its own "
                          "brokerId >= 1 (the controller decides which is master)")
    if broker.broker_heartbeat_interval <= 0:
        raise ConfigError("brokerHeartbeatInterval: must be > 0")
    broker.replica_id = broker.broker_id
    broker.controller_master_role = (store.broker_role if store.broker_role is not
                                     BrokerRole.SLAVE else BrokerRole.SYNC_MASTER)
    broker.broker_role = store.broker_role = BrokerRole.SLAVE


def _check(c: BrokerConfig) -> None:
    if not c.broker_name:
        raise ConfigError("brokerName: must not be empty")
    if not c.broker_cluster_name:
        raise ConfigError("brokerClusterName: must not be empty")
    if not 0 <= c.listen_port <= 65535:
        raise ConfigError(f"listenPort: {c.listen_port} is not a port")
    if not -1 <= c.ha_listen_port <= 65535:
        raise ConfigError(f"haListenPort: {c.ha_listen_port} is not a port")
    if not -1 <= c.send_listen_port <= 65535:
        raise ConfigError(f"sendListenPort: {c.send_listen_port} is not a port")
    if not -1 <= c.remoting_port <= 65535:
        raise ConfigError(f"remotingPort: {c.remoting_port} is not a port (-1 = listenPort "
                          "+ 4, 0 = a free port)")
    if not -1 <= c.grpc_proxy_port <= 65535:
        raise ConfigError(f"grpcProxyPort: {c.grpc_proxy_port} is not a port (-1 = listenPort "
                          "+ 3, 0 = off)")
    if c.grpc_proxy_max_delivery_attempts < 1:
        raise ConfigError("grpcProxyMaxDeliveryAttempts: must be >= 1")
    if not -1 <= c.metrics_port <= 65535:
        raise ConfigError(f"metricsPort: {c.metrics_port} is not a port (0 = off, -1 = any "
                          "free port)")
    if c.ha_master_address:
        host, sep, port = c.ha_master_address.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise ConfigError(f"haMasterAddress: expected HOST:PORT, got {c.ha_master_address!r}")
    if c.ha_slave_fallbehind_max < 0:
        raise ConfigError("haSlaveFallbehindMax: must be >= 0")
    if c.trace_topic_enable and not re.match(TOPIC_PATTERN, c.msg_trace_topic_name):
        raise ConfigError(f"msgTraceTopicName: {c.msg_trace_topic_name!r} is not a topic name")
    if c.default_topic_queue_nums <= 0:
        raise ConfigError("defaultTopicQueueNums: must be > 0")
    if c.max_topic_queue_nums < c.default_topic_queue_nums:
        raise ConfigError(f"maxTopicQueueNums: {c.max_topic_queue_nums} is below "
                          f"defaultTopicQueueNums {c.default_topic_queue_nums}")
    for name in ("send_channel_max_connections", "send_channel_idle_timeout_mills",
                 "send_channel_frame_timeout_mills", "register_name_server_period",
                 "register_broker_timeout_mills",
                 "flush_consumer_offset_interval", "flush_delay_offset_interval",
                 "slave_synchronize_interval", "ha_max_time_slave_not_catchup",
                 "ha_housekeeping_interval", "transaction_check_interval"):
        if getattr(c, name) <= 0:
            raise ConfigError(f"{name}: must be > 0")
    if c.transaction_time_out < 0:
        raise ConfigError("transactionTimeOut: must be >= 0")
    if c.transaction_check_max < 0:
        raise ConfigError("transactionCheckMax: must be >= 0")
    if c.acl_enable and not c.acl_file:
        raise ConfigError("aclFile: aclEnable=true needs the account file's path")
    if c.tls_enable and not (c.tls_cert_path and c.tls_key_path):
        raise ConfigError("tlsEnable=true needs tlsCertPath and tlsKeyPath")
    if c.tls_mutual and not c.tls_ca_path:
        raise ConfigError("tlsMutual=true needs tlsCaPath (the CA of client certificates)")
    if c.cluster_key and len(c.cluster_key) < 8:
        raise ConfigError("clusterKey: at least 8 characters")
    for addr in c.namesrv_addr_list:
        host, sep, port = addr.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise ConfigError(f"namesrvAddr: expected HOST:PORT;HOST:PORT, got {addr!r}")


def load_config_file(path: str | os.PathLike[str],
                     overrides: dict[str, str] | None = None) -> LoadedConfig:
    """Reads broker.conf; `overrides` (e.g. `-n` on the command line) win over the file."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError(f"cannot read {path}: {e.strerror}") from None
    props = read_properties(text)
    props.update(overrides or {})
    loaded = parse_config(props)
    loaded.defaulted_keys = [k for k in IDENTITY_KEYS if not props.get(k, "").strip()]
    if loaded.broker.namesrv_addr_list and "namesrvAddr" in loaded.defaulted_keys:
        loaded.defaulted_keys.remove("namesrvAddr")  # $NAMESRV_ADDR
    return loaded


def resolve_ip(host: str) -> str:
    """An IP literal for `host` (the store writes STOREHOST as 4 or 16 raw bytes)."""
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        pass
    try:
        return socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)[0][4][0]
    except (OSError, IndexError) as e:
        raise ConfigError(f"brokerIP1: cannot resolve {host!r}: {e}") from None
