"""Client constants, as RocketMQ's client names them (SPEC §6)."""

from __future__ import annotations

DEFAULT_TOPIC_QUEUE_NUMS = 4  # DefaultMQProducer.defaultTopicQueueNums
RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"
DLQ_GROUP_TOPIC_PREFIX = "%DLQ%"
RETRY_QUEUE_NUMS = 1  # the queues a broker creates a retry topic with (retryQueueNums)

# Name server and broker housekeeping (ClientConfig).
POLL_NAME_SERVER_INTERVAL_S = 30.0  # route refresh
HEARTBEAT_BROKER_INTERVAL_S = 30.0
PERSIST_CONSUMER_OFFSET_INTERVAL_S = 5.0
NAMESRV_CALL_TIMEOUT_S = 3.0
# A producer's route not used for this many refresh rounds is no longer refreshed (it is
# dropped from the cache and fetched again at its next use); subscribed topics always are.
ROUTE_IDLE_ROUNDS = 4
# The batched refresh handles this many routes per client loop turn.
ROUTE_REFRESH_CHUNK = 2000
# A topic whose route lost a group's master (the name servers dropped it: the process died),
# or whose send found its broker unreachable, is refreshed this often (jittered +-20%, one
# batched call for all such topics) until the master is listed again, at most
# ROUTE_WATCH_MAX_S: a restarted master is sent to within this much of registering again,
# not at the next POLL_NAME_SERVER_INTERVAL_S. Meanwhile a send to a route left without any
# master waits for one within its timeout; one to a masterless route fetched this recently
# fails NO_ROUTE from the cache (each used to ask the name server).
ROUTE_WATCH_INTERVAL_S = 0.25
ROUTE_WATCH_MAX_S = 120.0
ADMIN_CALL_TIMEOUT_S = 3.0  # heartbeats, offsets, consumer lists

# Producer (DefaultMQProducer).
SEND_MSG_TIMEOUT_S = 3.0
RETRY_TIMES_WHEN_SEND_FAILED = 2  # retries on another broker after the first attempt
MAX_MESSAGE_SIZE = 4 * 1024 * 1024
# Latency fault tolerance (MQFaultStrategy): a send that took at least LATENCY_MAX[i] ms
# makes its broker unavailable for NOT_AVAILABLE_DURATION[i] ms.
LATENCY_MAX_MS = (50, 100, 550, 1000, 2000, 3000, 15000)
NOT_AVAILABLE_DURATION_MS = (0, 0, 30000, 60000, 120000, 180000, 600000)
# A send that failed outright isolates its broker this long (deliberate choice: RocketMQ
# isolates for the 10 min of a 30 s latency; 30 s lets a restarted broker back soon).
FAILURE_ISOLATION_MS = 30_000

# Async sends gathered into batches (RocketMQ 5 auto-batching, Kafka's accumulator).
BATCH_LINGER_S = 0.002
BATCH_MAX_COUNT = 64
BATCH_MAX_BYTES = 256 * 1024
MAX_INFLIGHT_BATCHES_PER_TOPIC = 4

# Consumer (DefaultMQPushConsumer).
REBALANCE_INTERVAL_S = 20.0
PULL_BATCH_SIZE = 32
CONSUME_MESSAGE_BATCH_MAX_SIZE = 1
CONSUME_THREAD_NUMS = 4
PULL_THRESHOLD_FOR_QUEUE = 1000  # messages cached per queue before pulling pauses
PULL_THRESHOLD_SIZE_FOR_QUEUE_MIB = 100  # MiB of bodies cached per queue, likewise
PULL_TIME_DELAY_WHEN_FLOW_CONTROL_S = 0.05
PULL_TIME_DELAY_WHEN_EXCEPTION_S = 3.0
BROKER_SUSPEND_MAX_TIME_MS = 15_000  # long polling
CONSUMER_TIMEOUT_WHEN_SUSPEND_S = 30.0
# A broker address that failed a pull is skipped (its slave used instead) this long.
PULL_ADDRESS_DOWN_S = 30.0
# A failed message goes back to %RETRY%{group} at most this often, then to %DLQ%{group}.
MAX_RECONSUME_TIMES = 16
PROPERTY_RETRY_TOPIC = "RETRY_TOPIC"  # the original topic of a message in a retry topic
# A failed message the broker could not take back is consumed again this much later.
SEND_BACK_FAILED_RETRY_S = 5.0
SEND_BACK_TIMEOUT_S = 3.0
# Broadcasting consumers retry a failed message themselves, as a broker would delay it
# (delay levels 3.. of "1s 5s 10s 30s 1m ... 2h"): the n-th retry waits
# RECONSUME_DELAYS_S[min(n, len) - 1].
RECONSUME_DELAYS_S = (10, 30, 60, 120, 180, 240, 300, 360, 420, 480, 540, 600, 1200, 1800,
                      3600, 7200)
SUSPEND_CURRENT_QUEUE_TIME_S = 1.0  # orderly: pause after SUSPEND_CURRENT_QUEUE_A_MOMENT
REBALANCE_LOCK_INTERVAL_S = 20.0  # orderly: queue locks renewed this often
# ... and this often while an owned queue lacks its lock (another consumer held it for a
# moment, e.g. around a master's restart): consuming resumes soon after it lets go.
LOCK_LOST_RETRY_S = 1.0
WATCH_RECONNECT_DELAY_S = 1.0
OFFSETS_FILE_NAME = "offsets.json"
