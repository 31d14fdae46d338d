"""Health check of a name server (the compose cluster's, or any): it answers a route call.

    python -m nameserver.healthcheck [--addr HOST:PORT] [--timeout SECONDS]

Exit 0 when the name server at HOST:PORT (default 127.0.0.1:9876) answers GetClusterInfo
with SUCCESS, else 1 with the reason on one line of stdout (Docker keeps it in the
container's health log). A name server with TLS: $MQ_TLS_CA names its CA.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import grpc

from mqproto import common_pb2, namesrv_pb2, namesrv_pb2_grpc
from remoting.tls import ClientTls, grpc_channel

DEFAULT_ADDR = "127.0.0.1:9876"
DEFAULT_TIMEOUT_S = 3.0


def cluster_info(addr: str, timeout_s: float
                 ) -> tuple[namesrv_pb2.GetClusterInfoResponse | None, str]:
    """The name server's cluster info, or None and why it could not be had."""
    with grpc_channel(addr, ClientTls.from_env()) as channel:
        stub = namesrv_pb2_grpc.NamesrvServiceStub(channel)
        try:
            r = stub.GetClusterInfo(namesrv_pb2.GetClusterInfoRequest(), timeout=timeout_s)
        except grpc.RpcError as e:
            return None, e.code().name  # type: ignore[attr-defined]
    if r.status.code != common_pb2.SUCCESS:
        return None, common_pb2.ResponseCode.Name(r.status.code)
    return r, ""


def check(addr: str, timeout_s: float) -> str:
    """"" when the name server at `addr` answers; else what went wrong."""
    _, problem = cluster_info(addr, timeout_s)
    return f"name server {addr}: {problem}" if problem else ""


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m nameserver.healthcheck",
                                     description="Exit 0 when the name server answers.")
    parser.add_argument("--addr", default=DEFAULT_ADDR, help=f"default {DEFAULT_ADDR}")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S,
                        help=f"seconds (default {DEFAULT_TIMEOUT_S:g})")
    args = parser.parse_args(argv)
    problem = check(args.addr, args.timeout)
    print(problem or f"name server {args.addr} answers")
    return 1 if problem else 0


if __name__ == "__main__":
    sys.exit(main())
