"""The Python client of the cluster: producer and push consumer (SPEC §6).

docs/client.md describes the API.
"""

from mqclient.allocate import AllocateAveragely, AllocateAveragelyByCircle
from mqclient.consume_service import ConsumeStatus
from mqclient.consumer import PushConsumer, consume_all
from mqclient.message import (
    Message,
    MessageExt,
    MessageQueue,
    MQClientError,
    SendFuture,
    SendResult,
    SendStatus,
)
from mqclient.producer import Producer, select_by_hash
from mqclient.rebalance import ConsumeFromWhere, MessageModel
from mqclient.selector import MessageSelector
from mqclient.transaction import (
    LocalTransactionState,
    TransactionListener,
    TransactionProducer,
    TransactionSendResult,
)

__all__ = [
    "AllocateAveragely",
    "AllocateAveragelyByCircle",
    "ConsumeFromWhere",
    "ConsumeStatus",
    "LocalTransactionState",
    "Message",
    "MessageExt",
    "MessageModel",
    "MessageQueue",
    "MessageSelector",
    "MQClientError",
    "Producer",
    "PushConsumer",
    "consume_all",
    "SendFuture",
    "SendResult",
    "SendStatus",
    "TransactionListener",
    "TransactionProducer",
    "TransactionSendResult",
    "select_by_hash",
]
