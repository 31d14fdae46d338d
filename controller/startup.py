"""`mqcontroller`: a standalone controller (RocketMQ 5's `mqcontroller`).

    mqcontroller --etcd HOST:PORT[;HOST:PORT...] [--listen HOST:PORT] [--advertise HOST:PORT]
                 [--prefix /mqcluster/controller] [--heartbeat-timeout-ms 2000]
                 [--enable-elect-unclean-master] [--log-level INFO]

Start several against one etcd: one is active (etcd's leader key), the others take over
within its lease. Once serving it prints `The controller boot success. listen=HOST:PORT`.
SIGTERM or SIGINT stops it (exit 0); a bad argument or a port in use exits with 1.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from collections.abc import Sequence

from controller.etcd_store import EtcdStore, parse_endpoints
from controller.server import Controller, ControllerConfig

log = logging.getLogger("controller")
BOOT_SUCCESS_PREFIX = "The controller boot success. listen="


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    d = ControllerConfig()
    ap = argparse.ArgumentParser(prog="mqcontroller", description=(
        "Controller of controller mode: elects a broker group's master, state in etcd."))
    ap.add_argument("--etcd", required=True, help="etcd client endpoints HOST:PORT;HOST:PORT")
    ap.add_argument("--listen", default="127.0.0.1:9878", help="HOST:PORT to serve on")
    ap.add_argument("--advertise", default="", help="address given to brokers (default: "
                                                    "the listen address)")
    ap.add_argument("--prefix", default=d.etcd_prefix, help="etcd key prefix")
    ap.add_argument("--heartbeat-timeout-ms", type=int, default=d.heartbeat_timeout_ms,
                    help="a broker not heard this long is dead")
    ap.add_argument("--scan-interval-ms", type=int, default=d.scan_interval_ms)
    ap.add_argument("--lease-ttl-s", type=int, default=d.lease_ttl_s,
                    help="the active controller's etcd lease")
    ap.add_argument("--enable-elect-unclean-master", action="store_true",
                    help="elect a replica outside the SyncStateSet when none in it is alive "
                         "(acknowledged messages may be lost)")
    ap.add_argument("--log-level", type=str.upper, default="INFO",
                    choices=("DEBUG", "INFO", "WARNING", "ERROR"))
    args = ap.parse_args(argv)
    for name in ("heartbeat_timeout_ms", "scan_interval_ms", "lease_ttl_s"):
        if getattr(args, name) <= 0:
            ap.error(f"--{name.replace('_', '-')} must be positive")
    try:
        args.endpoints = parse_endpoints(args.etcd)
    except ValueError as e:
        ap.error(str(e))
    return args


def config_from(args: argparse.Namespace) -> ControllerConfig:
    return ControllerConfig(
        listen=args.listen, advertise=args.advertise, etcd_endpoints=args.etcd,
        etcd_prefix=args.prefix, heartbeat_timeout_ms=args.heartbeat_timeout_ms,
        scan_interval_ms=args.scan_interval_ms, lease_ttl_s=args.lease_ttl_s,
        enable_elect_unclean_master=args.enable_elect_unclean_master)


async def serve(args: argparse.Namespace) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    config = config_from(args)
    controller = Controller(config, EtcdStore(args.endpoints, config.etcd_prefix))
    try:
        address = await controller.start()
        print(f"{BOOT_SUCCESS_PREFIX}{address}", flush=True)
        await stop.wait()
    finally:
        await controller.stop()


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=args.log_level, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s - %(message)s")
    try:
        asyncio.run(serve(args))
    except OSError as e:
        log.error("controller failed: %s", e)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
