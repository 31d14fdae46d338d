"""Generated protobuf and gRPC modules of the cluster's wire protocol.

The sources are proto/mqcluster/v1/*.proto (package ``mqcluster.v1``); regenerate
with ``scripts/gen_proto.sh``. Import the modules directly::

    from mqproto import common_pb2, namesrv_pb2, namesrv_pb2_grpc
"""
