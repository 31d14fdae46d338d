"""What every part of the cluster shares: the message record format (``codec``) and its C fast
paths (``native``), the constants of the message format and of the processes' contract
(``constants``), and the route entries clients read from name servers (``route``).

It imports nothing of the store, the broker, the name server or the clients, so each of them
(and each protocol) can build on it, as RocketMQ's ``common`` module is built on.
"""
