"""RocketMQ 5's gRPC protocol (``apache.rocketmq.v2.MessagingService``) served by a broker,
as RocketMQ 5's proxy in local mode: the official SDKs (Java, Go, C++, C#, Rust, Python,
Node) send, receive, ack and consume through it, on the broker's own store and send path.

- `server`: the gRPC server on grpcProxyPort, started by broker/startup.py.
- `service`: the RPC handlers (route, heartbeat, telemetry settings, send, receive / ack /
  change invisible duration, dead-letter forwarding, termination).
- `pop`: the SimpleConsumer's pop model (in-flight messages, receipt handles, redelivery,
  dead letters) with its state log, so that a restart loses nothing received and not acked.
- `convert`: v2 messages and statuses <-> the broker's.
- `route`: topic routes from the name servers, with every broker's v2 endpoint.
"""
