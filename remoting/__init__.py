"""The cluster's hand-written transport, beside the generated stubs of ``mqproto/``.

- ``framing``: the send channel's frames on plain TCP (and RocketMQ's MessageBatch elements).
- ``command`` / ``connection``: RocketMQ 4.x's RemotingCommand (JSON and binary headers)
  and its asyncio connections and server (opaque correlation, oneway, bounded frames).
- ``serving``: guards every gRPC server installs (undecodable requests, loop stalls, accept
  errors, the file-descriptor limit) and helpers that run stepwise work.
- ``tls`` / ``tls_server``: TLS settings and channels; the send channel's TLS layer.
- ``metrics_http``: the small HTTP server behind ``/metrics``.
- ``local_address``: which local address reaches a peer.
"""
