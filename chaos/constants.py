"""Constants of mqchaos (one place, as STYLE.md asks)."""

from __future__ import annotations

# Message properties carrying the workload's identity of a message (workload.py).
PROPERTY_KEY = "chaos_key"
PROPERTY_SEQ = "chaos_seq"

# Consumers throttled to keep a backlog pull this many messages per call and cache at most
# about twice this per queue (the client's defaults: 32 and 1000).
THROTTLED_PULL_BATCH = 32

# A consumer held back by its share of what was acknowledged looks again this often.
SHARE_POLL_S = 0.01

# Each client shutdown is waited for this long; one that hangs is reported, not waited on.
SHUTDOWN_TIMEOUT_S = 30.0
# Producer threads end within a send timeout (3 s) after the send phase; waited this long.
PRODUCER_JOIN_TIMEOUT_S = 30.0

# After the send phase: wait until every acknowledged message was consumed; or, once no
# message came for DRAIN_CHECK_S, until a final read finds none of the missing ones on any
# broker (they are lost: nothing to wait for); or until no message came for DRAIN_QUIET_S
# (longer than the 30 s a client skips a broker address whose pull failed); never longer
# than DRAIN_MAX_S.
DRAIN_CHECK_S = 5.0
DRAIN_QUIET_S = 40.0
DRAIN_MAX_S = 120.0

# Preparing the cluster: topics reach the slaves (every 10 s, slaveSynchronizeInterval),
# slaves in sync, a restarted broker booted and registered.
PREPARE_TIMEOUT_S = 45.0
RESTART_TIMEOUT_S = 60.0
# Consumers of a group share the queues before the send phase begins (an orderly consumer
# that lost the race for a queue's lock tries again at the next rebalance, 20 s later).
BALANCE_TIMEOUT_S = 45.0
BALANCE_NUDGE_S = 2.0  # not balanced yet: ask the group's consumers to rebalance now
POLL_S = 0.2
AWAIT_POLL_S = 1.0  # an await step asks the name servers / the master this often
# The committed offsets of the consumer groups are sampled from the masters this often
# (scenarios with probe_offsets).
OFFSETS_PROBE_S = 1.0
ADMIN_TIMEOUT_S = 3.0

PROGRESS_INTERVAL_S = 1.0  # on a terminal; else a line every PROGRESS_LOG_INTERVAL_S
PROGRESS_LOG_INTERVAL_S = 5.0

# Output files in the run's directory.
HISTORY_FILE = "history.jsonl"
RESULT_FILE = "result.json"
SUMMARY_FILE = "summary.txt"
CHART_FILE = "chart.png"
CLUSTER_DIR = "cluster"
CLIENT_LOG_FILE = "client.log"  # the client library's log lines during the run
