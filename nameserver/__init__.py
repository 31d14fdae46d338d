"""Name server: route tables fed by broker registrations (SPEC §3).

- ``routeinfo``: RouteInfoManager, the four route tables, pure and synchronous
- ``processor``: the gRPC NamesrvService on top of it
- ``controller``: NamesrvController, server plus the scan of silent brokers
- ``startup``: ``python -m nameserver`` / ``mqnamesrv``
"""
