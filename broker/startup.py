"""Process entry point of the broker (RocketMQ's BrokerStartup).

    python -m broker -c broker.conf [-n NAMESRV_ADDR] [--set KEY=VALUE ...] [--log-level LEVEL]
    mqbroker         -c broker.conf [-n NAMESRV_ADDR] [--set KEY=VALUE ...] [--log-level LEVEL]

`--set` gives a broker.conf key on the command line (it wins over the file, `-n` over
both): one file can serve several brokers whose ports or addresses differ (compose/).

Logs go to stderr. Once serving and registered it prints one line on stdout,
``The broker[NAME, HOST:PORT] boot success. serializeType=PROTOBUF and name server is ADDRS``
with the port actually bound (useful with listenPort=0). SIGTERM or SIGINT stops it cleanly
(unregister, flush, persist offsets, close files) with exit code 0; a configuration or
start-up problem exits with 1.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import gc
import logging
import signal
import sys
from collections.abc import Sequence

from broker.config import ConfigError, LoadedConfig, identity_problem, load_config_file
from broker.constants import GC_YOUNG_THRESHOLD
from broker.controller import BrokerController
from broker.persistence import ConfigFileCorrupt
from broker.registration import RegistrationRefused
from common.constants import BROKER_BOOT_SUCCESS_PREFIX
from proxy.server import GrpcProxy
from remoting.serving import raise_nofile_limit
from store.cq_files import limits_report

log = logging.getLogger("broker")

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s - %(message)s"
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


def _key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE (a broker.conf key), got {text!r}")
    return key.strip(), value.strip()


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="mqbroker", description="Broker of the message cluster.")
    parser.add_argument("-c", "--config-file", required=True,
                        help="broker.conf (RocketMQ properties: brokerName=broker-a, ...)")
    parser.add_argument("-n", "--namesrv-addr", default=None,
                        help="name server addresses HOST:PORT;HOST:PORT (overrides namesrvAddr)")
    parser.add_argument("--set", type=_key_value, action="append", default=[],
                        metavar="KEY=VALUE", dest="set_keys",
                        help="a broker.conf key, overriding the file (repeatable)")
    parser.add_argument("--log-level", type=str.upper, choices=LOG_LEVELS, default="INFO",
                        help="logging level (default INFO)")
    parser.add_argument("--check-config", action="store_true",
                        help="only check the configuration: exit 0 when it is good, 1 (the "
                             "problem logged) when not; nothing is started")
    return parser.parse_args(argv)


def config_overrides(args: argparse.Namespace) -> dict[str, str]:
    """broker.conf keys given on the command line: `--set` pairs, then `-n`."""
    overrides = dict(args.set_keys)
    if args.namesrv_addr:
        overrides["namesrvAddr"] = args.namesrv_addr
    return overrides


def boot_message(controller: BrokerController) -> str:
    namesrv = ";".join(controller.config.namesrv_addr_list) or "(none)"
    return (f"{BROKER_BOOT_SUCCESS_PREFIX}{controller.config.broker_name}, "
            f"{controller.broker_addr}] boot success. serializeType=PROTOBUF and name server "
            f"is {namesrv}")


async def serve(loaded: LoadedConfig) -> None:
    """Runs one broker until SIGTERM or SIGINT."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()

    def on_signal(signum: signal.Signals) -> None:
        log.info("received %s, shutting down", signum.name)
        stop.set()

    handled = (signal.SIGTERM, signal.SIGINT)
    for signum in handled:
        loop.add_signal_handler(signum, on_signal, signum)
    # Controller mode may ask for a restart in place (a demoted master cuts its tail before
    # its store starts again): each start gets the configuration as loaded (roles change).
    pristine = copy.deepcopy(loaded)
    try:
        while not stop.is_set():
            if not await _serve_once(copy.deepcopy(pristine), stop):
                break
    finally:
        for signum in handled:
            loop.remove_signal_handler(signum)


async def _serve_once(loaded: LoadedConfig, stop: asyncio.Event) -> bool:
    """Runs the broker until `stop` (False) or until it asks to be started again (True)."""
    controller = BrokerController(loaded)
    v2: GrpcProxy | None = None
    try:
        await controller.start()
        # RocketMQ 5's gRPC protocol for the official SDKs (grpcProxyPort; 0 = off).
        assert controller.context is not None and controller.messaging is not None
        v2 = await GrpcProxy.start_for(controller.context, controller.messaging.send,
                                       controller.tls, controller.peer_tls)
        print(boot_message(controller), flush=True)
        stopping = asyncio.ensure_future(stop.wait())
        restart = asyncio.ensure_future(controller.restart_requested.wait())
        try:
            await asyncio.wait({stopping, restart}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopping.cancel()
            restart.cancel()
        return controller.restart_requested.is_set() and not stop.is_set()
    finally:
        if v2 is not None:
            await v2.stop()
        await controller.shutdown()


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=args.log_level, format=LOG_FORMAT, stream=sys.stderr)
    try:
        loaded = load_config_file(args.config_file, config_overrides(args))
    except ConfigError as e:
        log.error("bad configuration in %s: %s", args.config_file, e)
        return 1
    for key in loaded.unknown_keys:
        log.warning("unknown key %s in %s ignored", key, args.config_file)
    if problem := identity_problem(loaded, args.config_file):
        log.error("bad configuration: %s", problem)
        return 1
    if args.check_config:
        return 0
    if "brokerName" in loaded.defaulted_keys:
        log.warning("no brokerName in %s: named after this host, %s",
                    args.config_file, loaded.broker.broker_name)
    if "namesrvAddr" in loaded.defaulted_keys:
        log.warning("no name server (namesrvAddr in %s, -n or $NAMESRV_ADDR): this broker "
                    "registers nowhere, clients reach it only by its address",
                    args.config_file)
    raise_nofile_limit(log)  # a descriptor per connection and per store file
    log.info("%s", limits_report(loaded.store.consume_queue_open_files))
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, older, oldest)
    try:
        asyncio.run(serve(loaded))
    except (OSError, ConfigError, ConfigFileCorrupt, RegistrationRefused) as e:
        log.error("broker failed: %s", e)
        return 1
    return 0
