"""mqadmin's controller-mode commands (RocketMQ 5's names): they ask the controllers at
`-a HOST:PORT[;HOST:PORT]` (the active one answers; the others say which it is).

    getControllerMetaData -a ADDR            which controller is active, its etcd term
    getSyncStateSet       -a ADDR [-b NAME]  master, epochs, SyncStateSet per broker group
    getBrokerEpoch        -a ADDR -b NAME    the master's epoch entries <epoch, start offset>
    electMaster           -a ADDR -b NAME -i ID   make broker ID master (if in sync)
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Callable
from typing import Any

from controller import protocol as cp
from controller.client import (
    ControllerClient,
    ControllerRefused,
    ControllerUnavailable,
    parse_addresses,
)
from mqclient.admin import AdminError
from mqclient.cli.output import dumps, table


def _call(args: argparse.Namespace, method: str, request: dict[str, Any]) -> dict[str, Any]:
    try:
        addrs = parse_addresses(args.controller_addr)
    except ValueError as e:
        raise AdminError(str(e)) from None

    async def run() -> dict[str, Any]:
        client = ControllerClient(addrs, timeout_s=args.timeout)
        try:
            return await client.call(method, request)
        finally:
            await client.close()
    try:
        return asyncio.run(run())
    except (ControllerUnavailable, ControllerRefused) as e:
        raise AdminError(str(e)) from None


def get_controller_metadata(out: Callable[[str], None], args: argparse.Namespace) -> None:
    meta = _call(args, cp.GET_METADATA, {})
    meta.pop("code", None)
    out(dumps(meta) if args.json else table(
        ["Controller", "Active", "Leader", "Term", "etcd"],
        [[meta.get("controllerAddress"), meta.get("leading"), meta.get("leader"),
          meta.get("term"), meta.get("etcd")]]))


def get_sync_state_set(out: Callable[[str], None], args: argparse.Namespace) -> None:
    request = {"brokerNames": [args.broker_name]} if args.broker_name else {}
    groups: dict[str, Any] = _call(args, cp.GET_SYNC_STATE_DATA, request).get("groups", {})
    if args.broker_name and args.broker_name not in groups:
        raise AdminError(f"broker group {args.broker_name} is not registered with the "
                         "controller")
    if args.json:
        out(dumps(groups))
        return
    rows = []
    for name, g in sorted(groups.items()):
        replicas = g.get("replicas", {})
        for broker_id, r in sorted(replicas.items(), key=lambda kv: int(kv[0])):
            bid = int(broker_id)
            rows.append([name, bid, r.get("address"),
                         "master" if bid == g.get("masterId") else "slave",
                         bid in (g.get("syncStateSet") or []), g.get("masterEpoch"),
                         g.get("syncStateSetEpoch"),
                         g.get("alive", {}).get(broker_id, "-")])
    out(table(["Broker Name", "Id", "Address", "Role", "In SyncStateSet", "Master Epoch",
               "SyncStateSet Epoch", "Heard (s ago)"], rows))


def get_broker_epoch(out: Callable[[str], None], args: argparse.Namespace) -> None:
    info = _call(args, cp.GET_REPLICA_INFO, {"brokerName": args.broker_name})
    entries = info.get("masterEpochEntries") or []
    ends = [start for _, start in entries[1:]] + [info.get("masterMaxOffset", -1)]
    if args.json:
        out(dumps({"brokerName": args.broker_name, "masterId": info.get("masterId"),
                   "epochs": [{"epoch": e, "startOffset": s, "endOffset": end}
                              for (e, s), end in zip(entries, ends, strict=True)]}))
        return
    out(table(["Broker Name", "Master Id", "Epoch", "Start Offset", "End Offset"],
              [[args.broker_name, info.get("masterId"), e, s, end]
               for (e, s), end in zip(entries, ends, strict=True)]))


def elect_master(out: Callable[[str], None], args: argparse.Namespace) -> None:
    info = _call(args, cp.ELECT_MASTER, {"brokerName": args.broker_name,
                                         "brokerId": args.broker_id, "designateElect": True})
    out(dumps({k: info.get(k) for k in ("masterId", "masterAddress", "masterEpoch",
                                        "syncStateSet")}) if args.json else
        f"broker group {args.broker_name}: master is {info.get('masterId')} "
        f"({info.get('masterAddress')}), master epoch {info.get('masterEpoch')}")


def add_commands(command: Callable[[str, Any, str], argparse.ArgumentParser],
                 handler: Callable[[Callable[..., None]], Any]) -> None:
    """Registers the commands; `handler(fn)` adapts fn(out, args) to mqadmin's handlers."""
    def with_controller(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
        p.add_argument("-a", "--controllerAddress", dest="controller_addr", required=True,
                       help="controller addresses HOST:PORT;HOST:PORT")
        return p
    with_controller(command("getControllerMetaData", handler(get_controller_metadata),
                            "which controller is active (controller mode)"))
    p = with_controller(command("getSyncStateSet", handler(get_sync_state_set),
                                "master, epochs and SyncStateSet of broker groups"))
    p.add_argument("-b", "--brokerName", dest="broker_name", help="one group (default: all)")
    p = with_controller(command("getBrokerEpoch", handler(get_broker_epoch),
                                "a group master's epoch entries"))
    p.add_argument("-b", "--brokerName", dest="broker_name", required=True)
    p = with_controller(command("electMaster", handler(elect_master),
                                "make a broker of a group master (it must be in sync)"))
    p.add_argument("-b", "--brokerName", dest="broker_name", required=True)
    p.add_argument("-i", "--brokerId", dest="broker_id", type=int, required=True)
