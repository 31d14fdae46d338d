"""Broker: serves send, pull, offsets, queries and admin over gRPC; owns one store (SPEC §4).

- ``config``: broker.conf -> BrokerConfig + StoreConfig
- ``topic_config`` / ``consumer_offsets``: the tables persisted under ``config/``
  (atomic writes with a ``.bak``: ``persistence``)
- ``send`` / ``pull``: request processing, long polling; ``status``: response codes
- ``messaging`` / ``admin``: the gRPC services; ``registration``: calls to name servers
- ``controller``: BrokerController wiring it all; ``startup``: ``python -m broker`` / ``mqbroker``
"""

import os

# gRPC's C core logs one line per failed TLS handshake ("Handshake failed ...
# CERTIFICATE_VERIFY_FAILED"): a port scan or a misconfigured client floods the broker log.
# Errors only, unless the user chose (read when grpc is first imported: this package's
# modules import it after this line).
os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
