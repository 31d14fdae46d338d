"""HA constants, as RocketMQ names them (MessageStoreConfig, SPEC §5). Intervals in ms."""

from __future__ import annotations

HA_LISTEN_PORT_OFFSET = 1  # haListenPort defaults to listenPort + 1
HA_TRANSFER_BATCH_SIZE = 32 * 1024  # haTransferBatchSize: most body bytes in one frame
HA_SEND_HEARTBEAT_INTERVAL = 5_000  # haSendHeartbeatInterval
HA_HOUSEKEEPING_INTERVAL = 20_000  # haHousekeepingInterval: a link silent this long is dropped
HA_SLAVE_FALLBEHIND_MAX = 256 * 1024 * 1024  # haSlaveFallbehindMax
# haMaxTimeSlaveNotCatchup (RocketMQ 5): a slave silent this long is not in sync.
HA_MAX_TIME_SLAVE_NOT_CATCHUP = 15_000
# HAClient (ha/backoff.py): the slave reconnects after HA_CONNECT_RETRY_MIN_INTERVAL,
# doubling per failed attempt up to HA_CONNECT_RETRY_DOWN_INTERVAL while the master's port
# does not take the connection (it is down or restarting), up to HA_CONNECT_RETRY_INTERVAL
# (RocketMQ: a fixed 5 s) while the master takes it and drops it before any data; each wait
# jittered to [wait/2, wait]. A link that worked starts over.
HA_CONNECT_RETRY_INTERVAL = 5_000
HA_CONNECT_RETRY_DOWN_INTERVAL = 500
HA_CONNECT_RETRY_MIN_INTERVAL = 50
# A connect that gets no answer (the master's host gone) is given up after this long, and
# tried again (a SYN retransmitted by the kernel comes seconds late).
HA_CONNECT_TIMEOUT = 3_000
SLAVE_TIMEOUT = 3_000  # slaveTimeout: a SYNC_MASTER send waits this long for a slave ack

# Slave: its hello proves what it holds by a CRC32 of this many bytes before its max offset.
HA_PROOF_TAIL_SIZE = 4096
# Master: write frames until this many bytes are queued on the socket, then drain once.
HA_WRITE_HIGH_WATER = 1024 * 1024
# Master: how often a transfer loop looks for new data when nobody wakes it.
HA_TRANSFER_POLL_INTERVAL = 100
# Slave: its receive buffer, the most bytes one socket read takes.
HA_READ_MAX_SIZE = 8 * 1024 * 1024
# Transfer rate in the status: bytes per second over this many seconds.
HA_TRANSFER_RATE_WINDOW = 5
