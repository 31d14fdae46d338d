"""The broker's face for RocketMQ 4.x clients: the remoting protocol (remoting/command.py)
on a port of its own (`remotingPort`), served through the same processors, store, offsets,
client table and queue locks as the gRPC protocol (broker/messaging.py). Only the broker's
startup code (broker/controller.py) imports this package.

- `server.py`: the port, the request codes and what each connection registered
- `sending.py`: SEND_MESSAGE (10), SEND_MESSAGE_V2 (310), SEND_BATCH_MESSAGE (320)
- `consuming.py`: pull with long polling (11), offsets (14, 15, 29-32), send-back (36)
- `clients.py`: heartbeats (34), unregister (35), consumer lists (38) and their change
  notices (40), queue locks (41, 42)
- `transactions.py`: END_TRANSACTION (37) and the check-back to producers (39)
- `acl.py`: aclEnable: the 4.x signature, then the accounts' permissions (acl/)
- `status.py`: our statuses as RocketMQ response codes
"""
