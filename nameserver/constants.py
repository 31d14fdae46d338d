"""Name server constants, as RocketMQ names them (SPEC §3)."""

from __future__ import annotations

DEFAULT_LISTEN = "0.0.0.0:9876"  # RocketMQ's default name server port
DEFAULT_LOG_LEVEL = "INFO"

# A broker whose last registration is older than this is removed by the scan.
BROKER_CHANNEL_EXPIRED_TIME_MS = 120_000
# The scan of not-active brokers: first run after 5 s, then every 10 s.
SCAN_NOT_ACTIVE_BROKER_INITIAL_DELAY_S = 5.0
SCAN_NOT_ACTIVE_BROKER_INTERVAL_S = 10.0

# A registered topic may have at most this many read or write queues (--max-topic-queue-nums;
# at least every broker's maxTopicQueueNums, whose default this is).
DEFAULT_MAX_TOPIC_QUEUE_NUMS = 1024

# The largest request the name server takes (--max-receive-mib): a registration carries the
# broker's whole topic table (gRPC's default, 4 MiB, refused ~40,000 topics of 100-character
# names). Compressed tables are held to this size once inflated, too.
DEFAULT_MAX_RECEIVE_MIB = 128
DEFAULT_MAX_RECEIVE_MESSAGE_BYTES = DEFAULT_MAX_RECEIVE_MIB * 1024 * 1024

# Seconds a stopping name server lets in-flight RPCs finish.
SHUTDOWN_GRACE_S = 1.0
