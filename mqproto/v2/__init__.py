"""Generated modules of RocketMQ 5's gRPC protocol, package ``apache.rocketmq.v2``.

The sources are proto/apache/rocketmq/v2/*.proto, vendored from apache/rocketmq-apis;
regenerate with ``scripts/gen_proto.sh``. Only the broker's v2 endpoint (``proxy/``)
imports them::

    from mqproto.v2 import definition_pb2, service_pb2, service_pb2_grpc
"""
