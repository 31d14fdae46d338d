"""Broker constants, as RocketMQ names them (SPEC §4)."""

from __future__ import annotations

from common.constants import AUTO_CREATE_TOPIC_KEY_TOPIC, MessageProperty

DEFAULT_CLUSTER_NAME = "DefaultCluster"
DEFAULT_LISTEN_PORT = 10911

NOT_ALLOWED_SEND_TOPICS = frozenset({AUTO_CREATE_TOPIC_KEY_TOPIC})
DEFAULT_TOPIC_QUEUE_NUMS = 8
# A topic may have at most this many read or write queues on a broker (maxTopicQueueNums):
# admin calls and consume stats work per queue. The name servers' limit must be as large.
DEFAULT_MAX_TOPIC_QUEUE_NUMS = 1024

# Consumption retries (SPEC §6): a message a consumer group failed goes to the group's retry
# topic with a growing delay, past its max reconsume times to the group's dead-letter topic.
RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"
DLQ_GROUP_TOPIC_PREFIX = "%DLQ%"
RETRY_QUEUE_NUMS = 1  # SubscriptionGroupConfig.retryQueueNums
DLQ_QUEUE_NUMS = 1  # MixAll.DLQ_NUMS_PER_GROUP
MAX_RECONSUME_TIMES = 16  # SubscriptionGroupConfig.retryMaxTimes
# A retry without a level from the consumer waits level 3 + times consumed (10 s, 30 s, ...).
RETRY_FIRST_DELAY_LEVEL = 3

# Periods (ms) of the broker's own services; all configurable in broker.conf.
REGISTER_NAME_SERVER_PERIOD_MS = 30_000
# A slave that registered before its master re-registers this often until it learns it.
FIND_MASTER_REGISTER_PERIOD_S = 2.0
# After a registration failed (a name server paused or overloaded, its link still up), the
# next one comes this soon instead of a whole period later: topics created meanwhile would
# stay unroutable for up to registerNameServerPeriod.
RETRY_FAILED_REGISTER_S = 5.0
REGISTER_BROKER_TIMEOUT_MS = 6_000
FLUSH_CONSUMER_OFFSET_INTERVAL_MS = 5_000
FLUSH_DELAY_OFFSET_INTERVAL_MS = 10_000  # the schedule service's progress
# A slave copies topic configs, consumer and delay offsets from its master this often
# (RocketMQ's SlaveSynchronize every 10 s; key slaveSynchronizeInterval is ours).
SLAVE_SYNCHRONIZE_INTERVAL_MS = 10_000
STATS_SAMPLE_INTERVAL_S = 1.0
TPS_WINDOW_S = 60  # putTps / getTotalTps: messages per second over the last minute
CHANNEL_EXPIRED_TIMEOUT_MS = 120_000  # a client silent this long leaves its group

# Transactions (SPEC §7; BrokerConfig.transactionTimeOut / transactionCheckInterval /
# transactionCheckMax): ms, ms, times.
TRANSACTION_TIME_OUT_MS = 6_000
TRANSACTION_CHECK_INTERVAL_MS = 60_000
TRANSACTION_CHECK_MAX = 15

# Pull (SPEC §4, §2.8).
DEFAULT_PULL_BATCH_SIZE = 32
MAX_SUSPEND_MILLIS = 60_000  # a pull never waits longer than this, whatever it asks
# A long poll answers this long before the caller's gRPC deadline, so the answer arrives.
DEADLINE_MARGIN_S = 0.2
# A filtered pull that moved past messages it does not take, and found none it does,
# answers with its moved offset this long after it came in at the latest (whatever its
# suspend time): its consumer commits it, so the group's lag drains. Not at once: under a
# stream of messages it skips, a pull would be answered for each arrival.
FILTER_SKIP_ANSWER_S = 1.0
WHICH_BROKER_WHEN_CONSUME_SLOWLY = 1

# Queries.
DEFAULT_QUERY_MAX_NUM = 32
MAX_QUERY_NUM = 64

# Seconds a stopping broker lets in-flight RPCs finish.
SHUTDOWN_GRACE_S = 2.0
SEND_LISTEN_PORT_OFFSET = 2  # the send channel's default port: listenPort + 2
# RocketMQ 5's gRPC protocol (apache.rocketmq.v2, package proxy/): listenPort + 3 by default.
GRPC_PROXY_PORT_OFFSET = 3
# RocketMQ 4.x clients' remoting port (broker/remoting4x): listenPort + 4 by default.
REMOTING_PORT_OFFSET = 4
# A message a v2 SimpleConsumer received this many times without an ack goes to %DLQ%
# (SubscriptionGroupConfig.retryMaxTimes + 1, as RocketMQ's proxy answers in its settings).
DEFAULT_GRPC_PROXY_MAX_DELIVERY_ATTEMPTS = MAX_RECONSUME_TIMES + 1
# Send channel limits: sendChannelMaxConnections, sendChannelIdleTimeoutMills (RocketMQ's
# serverChannelMaxIdleTimeSeconds is 120 s), sendChannelFrameTimeoutMills.
DEFAULT_SEND_CHANNEL_MAX_CONNECTIONS = 10_000
DEFAULT_SEND_CHANNEL_IDLE_MS = 120_000
DEFAULT_SEND_CHANNEL_FRAME_TIMEOUT_MS = 30_000

# Message properties the broker or the store owns (MessageConst.STRING_HASH_SET): a client
# must not send them as user properties; on the way out they travel in SystemProperties.
PROPERTY_WAIT_STORE_MSG_OK = "WAIT"
PROPERTY_RETRY_TOPIC = "RETRY_TOPIC"
PROPERTY_ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
PROPERTY_MAX_RECONSUME_TIMES = "MAX_RECONSUME_TIMES"
PROPERTY_TRANSACTION_ID = "__transactionId__"
PROPERTY_SHARDING_KEY = "SHARDING_KEY"
PROPERTY_MIN_OFFSET = "MIN_OFFSET"
PROPERTY_MAX_OFFSET = "MAX_OFFSET"

RESERVED_PROPERTIES = frozenset({
    MessageProperty.TAGS,
    MessageProperty.KEYS,
    MessageProperty.UNIQ_KEY,
    MessageProperty.DELAY,
    MessageProperty.REAL_TOPIC,
    MessageProperty.REAL_QID,
    MessageProperty.TRAN_MSG,
    MessageProperty.PGROUP,
    PROPERTY_WAIT_STORE_MSG_OK,
    PROPERTY_RETRY_TOPIC,
    PROPERTY_ORIGIN_MESSAGE_ID,
    PROPERTY_MAX_RECONSUME_TIMES,
    PROPERTY_TRANSACTION_ID,
    PROPERTY_SHARDING_KEY,
    PROPERTY_MIN_OFFSET,
    PROPERTY_MAX_OFFSET,
    "BUYER_ID",
    "TRANSFER_FLAG",
    "CORRECTION_FLAG",
    "MQ2_FLAG",
    "RECONSUME_TIME",
    "MSG_REGION",
    "TRACE_ON",
    "CHECK_IMMUNITY_TIME_IN_SECONDS",
    "TRANSACTION_CHECK_TIMES",
    "CONSUME_START_TIME",
    "INSTANCE_ID",
    "CLUSTER",
})

# The garbage collector's young-generation threshold (CPython's default is 700 allocations).
# A SEND_BATCHES frame of hundreds of small batches keeps thousands of objects alive for a
# moment; at 700 the collector ran through them again and again, and what survived went to
# the older generations' full walks: 5.5 % of the broker's CPU (perf) with async sends
# spread over 1,000 topics, ~0 at this threshold.
GC_YOUNG_THRESHOLD = 50_000
