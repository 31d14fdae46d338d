"""Process entry point of the name server (RocketMQ's NamesrvStartup).

    mqnamesrv            [--listen HOST:PORT] [--max-topic-queue-nums N]
                         [--max-receive-mib N] [--metrics-port N] [--no-remoting]
                         [--log-level LEVEL]
    python -m nameserver (the same)

Logs go to stderr. Once listening it prints one line on stdout,
``The Name Server boot success. listen=HOST:PORT``, with the port actually bound (useful
with port 0). SIGTERM or SIGINT stops it cleanly with exit code 0.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from collections.abc import Sequence

from acl.grpc_auth import CLUSTER_KEY_ENV
from common.constants import NAMESRV_BOOT_SUCCESS_MESSAGE
from controller.etcd_store import EtcdStore, parse_endpoints
from controller.server import Controller, ControllerConfig
from controller.startup import BOOT_SUCCESS_PREFIX as CONTROLLER_BOOT_SUCCESS_PREFIX
from nameserver.constants import (
    DEFAULT_LISTEN,
    DEFAULT_LOG_LEVEL,
    DEFAULT_MAX_RECEIVE_MIB,
    DEFAULT_MAX_TOPIC_QUEUE_NUMS,
)
from nameserver.controller import NamesrvController, split_host_port
from remoting.serving import raise_nofile_limit
from remoting.tls import ServerTls, TlsError

log = logging.getLogger("nameserver")

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s - %(message)s"
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


def _listen_address(text: str) -> str:
    try:
        split_host_port(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc
    return text


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="mqnamesrv", description="Name server of the message cluster."
    )
    parser.add_argument(
        "--listen", type=_listen_address, default=DEFAULT_LISTEN,
        help=f"HOST:PORT to serve gRPC on (default {DEFAULT_LISTEN}; port 0 picks a free one)",
    )
    parser.add_argument(
        "--max-topic-queue-nums", type=int, default=DEFAULT_MAX_TOPIC_QUEUE_NUMS, metavar="N",
        help="refuse a broker registration with a topic of more read or write queues than "
             f"this (default {DEFAULT_MAX_TOPIC_QUEUE_NUMS}; keep it >= every broker's "
             "maxTopicQueueNums)",
    )
    parser.add_argument(
        "--max-receive-mib", type=int, default=DEFAULT_MAX_RECEIVE_MIB, metavar="N",
        help="the largest request taken, in MiB: a broker's registration carries its whole "
             f"topic table (default {DEFAULT_MAX_RECEIVE_MIB})",
    )
    parser.add_argument(
        "--metrics-port", type=int, default=0, metavar="N",
        help="serve Prometheus /metrics on this port of the --listen host (default 0: off; "
             "-1: any free port, logged)",
    )
    parser.add_argument(
        "--cluster-key", default=os.environ.get(CLUSTER_KEY_ENV, ""), metavar="KEY",
        help="a secret shared with the cluster's brokers (their clusterKey): registrations "
             f"that do not prove it are refused (default ${CLUSTER_KEY_ENV}; empty: any "
             "broker may register)",
    )
    parser.add_argument("--tls-cert", default="", metavar="PEM",
                        help="serve gRPC over TLS with this certificate (and --tls-key)")
    parser.add_argument("--tls-key", default="", metavar="PEM", help="the certificate's key")
    parser.add_argument("--tls-ca", default="", metavar="PEM",
                        help="with --tls-mutual: the CA that signs client certificates")
    parser.add_argument("--tls-mutual", action="store_true",
                        help="clients (brokers included) must show a certificate")
    parser.add_argument(
        "--remoting", action=argparse.BooleanOptionalAction, default=True,
        help="serve RocketMQ 4.x clients (remoting) on the --listen port too, beside gRPC "
             "(default on; --no-remoting: gRPC only)",
    )
    parser.add_argument(
        "--enable-controller-in-namesrv", action="store_true",
        help="also run a controller of controller mode (RocketMQ's enableControllerInNamesrv) "
             "on --controller-listen, its state in etcd at --controller-etcd")
    parser.add_argument("--controller-listen", default="127.0.0.1:9878", metavar="HOST:PORT",
                        help="the embedded controller's address (default 127.0.0.1:9878)")
    parser.add_argument("--controller-etcd", default="", metavar="HOST:PORT;...",
                        help="etcd endpoints of the embedded controller")
    parser.add_argument(
        "--log-level", type=str.upper, choices=LOG_LEVELS, default=DEFAULT_LOG_LEVEL,
        help=f"logging level (default {DEFAULT_LOG_LEVEL})",
    )
    args = parser.parse_args(argv)
    if args.max_topic_queue_nums < 1:
        parser.error("--max-topic-queue-nums must be >= 1")
    if not 1 <= args.max_receive_mib <= 2047:
        parser.error("--max-receive-mib must be 1..2047")
    if not -1 <= args.metrics_port <= 65535:
        parser.error("--metrics-port must be a port, 0 (off) or -1 (any free port)")
    if bool(args.tls_cert) != bool(args.tls_key):
        parser.error("--tls-cert and --tls-key go together")
    if args.tls_mutual and not (args.tls_cert and args.tls_ca):
        parser.error("--tls-mutual needs --tls-cert, --tls-key and --tls-ca")
    if args.cluster_key and len(args.cluster_key) < 8:
        parser.error("--cluster-key must be at least 8 characters")
    if args.enable_controller_in_namesrv:
        try:
            parse_endpoints(args.controller_etcd)
            split_host_port(args.controller_listen)
        except ValueError as e:
            parser.error(f"--enable-controller-in-namesrv: {e}")
    return args


async def start_embedded_controller(listen: str, etcd: str) -> Controller:
    """enableControllerInNamesrv: a controller in this process, on its own port."""
    config = ControllerConfig(listen=listen, etcd_endpoints=etcd)
    controller = Controller(config, EtcdStore(parse_endpoints(etcd), config.etcd_prefix))
    address = await controller.start()
    print(f"{CONTROLLER_BOOT_SUCCESS_PREFIX}{address}", flush=True)
    return controller


async def serve(listen: str, max_topic_queue_nums: int = DEFAULT_MAX_TOPIC_QUEUE_NUMS,
                max_receive_mib: int = DEFAULT_MAX_RECEIVE_MIB, metrics_port: int = 0,
                cluster_key: str = "", tls: ServerTls | None = None,
                remoting: bool = True,
                embedded_controller: tuple[str, str] | None = None) -> None:
    """Run one name server until SIGTERM or SIGINT; `embedded_controller`: (listen, etcd
    endpoints) of a controller run beside it."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()

    def on_signal(signum: signal.Signals) -> None:
        log.info("received %s, shutting down", signum.name)
        stop.set()

    handled = (signal.SIGTERM, signal.SIGINT)
    for signum in handled:
        loop.add_signal_handler(signum, on_signal, signum)
    controller = NamesrvController(listen, max_topic_queue_nums=max_topic_queue_nums,
                                   max_receive_message_bytes=max_receive_mib * 1024 * 1024,
                                   metrics_port=metrics_port, cluster_key=cluster_key,
                                   tls=tls, remoting=remoting)
    embedded: Controller | None = None
    try:
        address = await controller.start()
        print(f"{NAMESRV_BOOT_SUCCESS_MESSAGE} listen={address}", flush=True)
        if embedded_controller is not None:  # its own line follows the name server's
            embedded = await start_embedded_controller(*embedded_controller)
        await stop.wait()
    finally:
        if embedded is not None:
            await embedded.stop()
        await controller.shutdown()
        for signum in handled:
            loop.remove_signal_handler(signum)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=args.log_level, format=LOG_FORMAT, stream=sys.stderr)
    try:
        raise_nofile_limit(log)
        asyncio.run(serve(args.listen, args.max_topic_queue_nums, args.max_receive_mib,
                          args.metrics_port, args.cluster_key,
                          ServerTls(args.tls_cert, args.tls_key, args.tls_ca, args.tls_mutual)
                          if args.tls_cert else None, args.remoting,
                          (args.controller_listen, args.controller_etcd)
                          if args.enable_controller_in_namesrv else None))
    except (OSError, TlsError) as exc:
        log.error("name server failed: %s", exc)
        return 1
    return 0
