"""Constants of the lag job and its report (SPEC §8), in one place."""

from __future__ import annotations

# Topic kinds: RocketMQ's prefixes of a group's retry and dead-letter topics.
RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"
DLQ_GROUP_TOPIC_PREFIX = "%DLQ%"
TOPIC_KIND_NORMAL = "normal"
TOPIC_KIND_RETRY = "retry"
TOPIC_KIND_DLQ = "dlq"
TOPIC_KINDS = (TOPIC_KIND_NORMAL, TOPIC_KIND_RETRY, TOPIC_KIND_DLQ)

# Burrow-style statuses, and their severity: the order of Burrow's status constants
# (OK < WARN < STOP < STALL < REWIND); a group shows the worst of its queues.
STATUS_OK = "OK"
STATUS_WARN = "WARN"
STATUS_STOP = "STOP"
STATUS_STALL = "STALL"
STATUS_REWIND = "REWIND"
STATUS_SEVERITY = {STATUS_OK: 1, STATUS_WARN: 2, STATUS_STOP: 4, STATUS_STALL: 5,
                   STATUS_REWIND: 6}
STATUSES_BY_SEVERITY = tuple(sorted(STATUS_SEVERITY, key=STATUS_SEVERITY.__getitem__))

DEFAULT_WINDOW = 10  # snapshots per queue the statuses look at (Burrow's intervals)
# RocketMQ consumers persist their offsets every persistConsumerOffsetInterval (5 s) whether
# or not they moved; STOP needs a silence of at least two such intervals, so a window whose
# span is shorter than that (one snapshot: span 0) does not call every queue stopped.
PERSIST_CONSUMER_OFFSET_INTERVAL_MS = 5_000
STOP_MIN_SILENCE_MS = 2 * PERSIST_CONSUMER_OFFSET_INTERVAL_MS

# How a figure was obtained (method columns).
BYTES_EXACT = "exact"  # passed on from the snapshot's lag_bytes_method
BYTES_ESTIMATED = "estimated"
BYTES_AVERAGE = "average"  # message lag x the broker's mean message size
BYTES_CAUGHT_UP = "caught_up"
BYTES_UNKNOWN = "unknown"
TIME_STORE_TIME = "store_time"  # clock - store time of the first unconsumed message
TIME_INTERPOLATED = "interpolated"  # kafka-lag-exporter's lookup, between two points
TIME_EXTRAPOLATED = "extrapolated"  # beyond the oldest point, on the table's trend line
TIME_CAUGHT_UP = "caught_up"
TIME_UNKNOWN = "unknown"
SLAVE_BYTES_FROM_ACK = "ack"
SLAVE_BYTES_FROM_SLAVE_MAX = "slave_max"
SLAVE_BYTES_NONE = "none"

# Output tables under the job's --out, one directory each.
QUEUE_LAG = "queue_lag"
GROUP_TOPIC_LAG = "group_topic_lag"
GROUP_LAG = "group_lag"
CLUSTER_LAG = "cluster_lag"
QUEUE_STATUS = "queue_status"
GROUP_STATUS = "group_status"
SLAVE_FALL_BEHIND = "slave_fall_behind"
BROKER_HEALTH = "broker_health"
OUTPUT_TABLES = (QUEUE_LAG, GROUP_TOPIC_LAG, GROUP_LAG, CLUSTER_LAG, QUEUE_STATUS,
                 GROUP_STATUS, SLAVE_FALL_BEHIND, BROKER_HEALTH)
# Kept beside the outputs for later runs (hidden: a leading underscore): per broker and
# snapshot the bytes and messages its byte-lag means come from.
BROKER_FACTS = "_broker_facts"
# Tables with rows per snapshot: a run appends the rows of its new snapshots (one run
# directory each); the others hold current state and are replaced whole by every run.
APPENDED_TABLES = (QUEUE_LAG, GROUP_TOPIC_LAG, GROUP_LAG, CLUSTER_LAG, SLAVE_FALL_BEHIND,
                   BROKER_HEALTH, BROKER_FACTS)
REPLACED_TABLES = (QUEUE_STATUS, GROUP_STATUS)
