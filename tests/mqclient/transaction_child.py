"""A producer process that dies inside its local transaction (tests/mqclient/
test_transaction_failures.py): `python -m tests.mqclient.transaction_child NAMESRV GROUP
TOPIC KEY` sends one transactional message and SIGKILLs itself before ending it."""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

from mqclient import LocalTransactionState, Message, MessageExt, TransactionProducer


class DieInTransaction:
    def execute_local_transaction(self, msg: Message, arg: Any) -> LocalTransactionState:
        print("half stored", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
        return LocalTransactionState.UNKNOWN

    def check_local_transaction(self, msg: MessageExt) -> LocalTransactionState:
        return LocalTransactionState.UNKNOWN


def main(namesrv: str, group: str, topic: str, key: str) -> None:
    producer = TransactionProducer(group, namesrv, DieInTransaction()).start()
    producer.send(Message(topic, b"from the child", tags="TagChild", keys=key))


if __name__ == "__main__":
    main(*sys.argv[1:5])
