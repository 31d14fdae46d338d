"""Transactional messages (SPEC §7; RocketMQ's broker/transaction).

A prepared (half) message is stored under RMQ_SYS_TRANS_HALF_TOPIC, queue 0, its real topic
and queue in properties, where no consumer sees it. EndTransaction COMMIT puts it to its real
topic; ROLLBACK does not; either way an op record (body: the half's queue offset) goes to
RMQ_SYS_TRANS_OP_HALF_TOPIC. On a master, a check service asks the producer group about
halves left without an outcome. Everything goes through the broker's one send / store path.

- messages.py: the pure builders (half, renewed half, final message, op record);
- table.py: which halves have no outcome yet, rebuilt from the two system queues;
- checks.py: the producers' check streams and which member a check goes to;
- service.py: end_transaction, the check run and its periodic task.
"""

from broker.transaction.checks import ProducerCheckStreams
from broker.transaction.messages import LocalTransactionState
from broker.transaction.service import TransactionalMessageService

__all__ = ["LocalTransactionState", "ProducerCheckStreams", "TransactionalMessageService"]
