"""Access control (issue 22): accounts with access and secret keys, per-topic and per-group
permissions (RocketMQ 4.x `plain_acl.yml` semantics), signed requests, and the shared
cluster key that authenticates brokers to name servers and slaves to their master.

- `acl.config`: the account file (YAML or JSON) and its validation.
- `acl.decision`: what an account may do (pure).
- `acl.signing`: request signatures, freshness and the replay cache.
- `acl.requirements`: what each kind of request needs, from which of its fields: the one
  table every protocol uses.
- `acl.resources`: each gRPC method (ours, the send channel's frames, v2) as a request kind.
- `acl.caller`: the account a handler serves, for what it finds (a message at an offset).
- `acl.store`: the account file, reloaded when it changes.
- `acl.grpc_auth`: the broker's server interceptor and the clients' interceptors.
"""
