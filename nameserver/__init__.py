"""Name server: route tables fed by broker registrations (SPEC §3).

- ``routeinfo``: RouteInfoManager, the four route tables, pure and synchronous
- ``processor``: the gRPC NamesrvService on top of it
- ``controller``: NamesrvController, server plus the scan of silent brokers
- ``startup``: ``python -m nameserver`` / ``mqnamesrv``
"""

import os

# gRPC's C core logs one line per failed TLS handshake ("Handshake failed ...
# CERTIFICATE_VERIFY_FAILED"): a port scan or a misconfigured client floods the name server log.
# Errors only, unless the user chose (read when grpc is first imported: this package's
# modules import it after this line).
os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
