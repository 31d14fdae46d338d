"""`mqcluster up|down|status`: a local cluster of real processes on loopback.

    mqcluster up     [--dir DIR] [--groups N] [--slaves M] [--namesrvs K] [--base-port P]
                     [--namesrv-port P]
                     [--flush SYNC_FLUSH|ASYNC_FLUSH] [--role ASYNC_MASTER|SYNC_MASTER]
                     [--set KEY=VALUE ...] [--no-metrics]
    mqcluster status [--dir DIR] [--json]
    mqcluster down   [--dir DIR] [--clean]

`up` writes broker.conf files, starts the name servers and brokers detached (their own
session; logs in DIR/logs), waits until every broker is registered with every name server
and prints NAMESRV_ADDR. The name server listens on RocketMQ's 127.0.0.1:9876 when that port
is free (else on a free port, and `up` says so; --namesrv-port or $MQCLUSTER_NAMESRV_PORT
choose another, 0 any free port). Every process serves Prometheus /metrics on a port of its own
(the Metrics column; DIR/prometheus.yml scrapes them all), unless --no-metrics. `down`
stops exactly the PIDs recorded by `up` (after checking each is still the process it
started). Exit codes: 0 done / all alive, 1 failure / not all alive.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from common.constants import (
    BROKER_BOOT_SUCCESS_PREFIX,
    CONSOLE_READY_PREFIX,
    NAMESRV_BOOT_SUCCESS_MESSAGE,
)
from mqclient.admin import AdminError, MQAdmin
from mqclient.cli.arguments import int_range, port_number, port_or_any, seconds
from mqclient.cli.errors import stdout_closed, unexpected
from mqclient.cli.local_cluster import (
    BROKER,
    BROKER_CONF,
    CONSOLE,
    CREDENTIALS_FILE,
    DEFAULT_CLUSTER_NAME,
    DEFAULT_NAMESRV_PORT,
    ETCD,
    FLUSH_TYPES,
    LAYOUT_FILE,
    LOG_DIR,
    MASTER_ROLES,
    NAMESRV,
    NAMESRV_PORT_ENV,
    PROMETHEUS_FILE,
    SECURITY_DIR,
    STATE_FILE,
    Layout,
    LocalClusterError,
    Node,
    ProcessRecord,
    broker_conf,
    check_ports_free,
    child_env,
    client_tls,
    free_ports,
    is_alive,
    is_stopped,
    metrics_ports_needed,
    pick_namesrv_port,
    plan_layout,
    port_is_free,
    ports_needed,
    prometheus_config,
    read_json,
    records_from_json,
    records_to_json,
    spawn,
    stop_processes,
    v2_ports_needed,
    with_controller,
    write_json,
    write_security,
    write_tls,
)
from mqclient.cli.output import dumps, table
from remoting.tls import TlsError

PROG = "mqcluster"
DEFAULT_DIR = "mqcluster-local"
DEFAULT_SHAPE = {"groups": 1, "slaves": 0, "namesrvs": 1, "flush": "ASYNC_FLUSH",
                 "role": "ASYNC_MASTER"}
BOOT_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 20.0
POLL_S = 0.1
STATUS_RPC_TIMEOUT_S = 2.0
LOG_TAIL_LINES = 5
EXIT_FAILURE = 1
EXIT_USAGE = 2  # as argparse
EXIT_INTERRUPTED = 130
# A local cluster is processes on one machine: a few of each (broker-a .. broker-z).
MAX_GROUPS = 26
MAX_SLAVES = 4
MAX_NAMESRVS = 4
MAX_TIMEOUT_S = 3600.0
CHECK_CONFIG_TIMEOUT_S = 60.0
# `up` options that shape a new cluster (not applied to one that runs), as given on the
# command line, by their argparse dest: the value that means "not given".
SHAPE_OPTIONS = {"groups": None, "slaves": None, "namesrvs": None, "base_port": None,
                 "namesrv_port": None, "flush": None, "role": None, "set": None,
                 "metrics": True, "acl": False, "tls": False}
OPTION_NAMES = {"base_port": "--base-port", "namesrv_port": "--namesrv-port",
                "metrics": "--no-metrics"}


STORE_ROOT_KEY = "storePathRootDir"
BAD_CONFIG_LINE = "bad configuration"  # what mqbroker logs when it refuses its broker.conf


class UsageError(LocalClusterError):
    """A bad argument found after parsing (a --set value the broker refuses): exit 2."""


def _out(text: str) -> None:
    print(text, flush=True)


# -- state -------------------------------------------------------------------------------------
def load_state(directory: Path) -> tuple[Layout, list[ProcessRecord]] | None:
    data = read_json(directory / STATE_FILE)
    if data is None:
        return None
    try:
        return Layout.from_json(data["layout"]), records_from_json(data["processes"])
    except (KeyError, TypeError) as e:
        raise LocalClusterError(f"{directory / STATE_FILE} is not an mqcluster state file "
                                f"({e}); remove it after checking nothing runs") from None


def save_state(directory: Path, layout: Layout, records: list[ProcessRecord]) -> None:
    write_json(directory / STATE_FILE, {"namesrv_addr": layout.namesrv_addr,
                                        "layout": layout.to_json(),
                                        "processes": records_to_json(records)})


# -- up ----------------------------------------------------------------------------------------
def _parse_sets(items: Sequence[str]) -> dict[str, str]:
    props = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise LocalClusterError(f"--set {item!r}: expected KEY=VALUE (a broker.conf key)")
        props[key.strip()] = value.strip()
    return props


def key_value(text: str) -> str:
    """--set KEY=VALUE (argparse type): a usage error without the '=' or the key."""
    key, sep, _ = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"{text!r}: expected KEY=VALUE (a broker.conf key)")
    return text


def check_broker_props(layout: Layout, directory: Path) -> None:
    """UsageError naming the problem when a broker would refuse the configuration `up`
    writes for the layout's first broker (a --set value of the wrong type, a bad
    combination): asks the broker itself (mqbroker --check-config), starting nothing.
    For a cluster that runs; a new one's brokers refuse it at boot (a UsageError too)."""
    node = layout.brokers[0]
    with tempfile.TemporaryDirectory(prefix="mqcluster-check-") as tmp:
        conf = Path(tmp) / BROKER_CONF
        conf.write_text(broker_conf(layout, node, directory))
        try:
            result = subprocess.run(
                [sys.executable, "-m", "broker", "-c", str(conf), "--check-config",
                 "--log-level", "ERROR"], capture_output=True, text=True,
                timeout=CHECK_CONFIG_TIMEOUT_S, stdin=subprocess.DEVNULL, env=child_env())
        except (OSError, subprocess.TimeoutExpired) as e:
            raise LocalClusterError(f"cannot check the broker configuration: {e}") from None
    if result.returncode != 0:
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        reason = lines[-1] if lines else f"exit status {result.returncode}"
        reason = reason.split(" - ", 1)[-1].replace(str(conf), "broker.conf")
        raise UsageError(f"--set: the brokers would refuse it: {reason}")


def given_shape_options(args: argparse.Namespace) -> list[str]:
    """The options of `up` given on the command line that shape a new cluster."""
    given = []
    for dest, unset in SHAPE_OPTIONS.items():
        value = getattr(args, dest, unset)
        if value == unset:
            continue
        name = OPTION_NAMES.get(dest, f"--{dest.replace('_', '-')}")
        if dest == "set":
            given.extend(f"--set {item}" for item in value)
        elif isinstance(value, bool):
            given.append(name)
        else:
            given.append(f"{name} {value}")
    return given


def requested_namesrv_port(args: argparse.Namespace) -> int | None:
    """--namesrv-port, else $MQCLUSTER_NAMESRV_PORT, else None (9876 when free)."""
    if args.namesrv_port is not None:
        return int(args.namesrv_port)
    text = os.environ.get(NAMESRV_PORT_ENV, "").strip()
    if not text:
        return None
    try:
        return port_or_any(text)
    except (ValueError, argparse.ArgumentTypeError):
        raise LocalClusterError(f"{NAMESRV_PORT_ENV}={text!r}: expected a port, 0 for any "
                                "free port") from None


def resolve_layout(args: argparse.Namespace, directory: Path) -> Layout:
    """Options given > the last layout of this directory > defaults; the last layout's ports
    are kept when the shape is unchanged and no --base-port is given, but for the first name
    server's port: 9876 when free (see pick_namesrv_port)."""
    previous_data = read_json(directory / LAYOUT_FILE)
    previous = Layout.from_json(previous_data) if previous_data else None
    shape: dict[str, Any] = {}
    for key, default in DEFAULT_SHAPE.items():
        given = getattr(args, key)
        shape[key] = given if given is not None else (
            getattr(previous, key) if previous else default)
    props = dict(previous.broker_props) if previous and args.set is None else {}
    props.update(_parse_sets(args.set or []))
    count = ports_needed(shape["groups"], shape["slaves"], shape["namesrvs"])
    metrics_count = (metrics_ports_needed(shape["groups"], shape["slaves"], shape["namesrvs"])
                     if args.metrics else 0)
    same_shape = previous is not None and previous.shape == (
        shape["groups"], shape["slaves"], shape["namesrvs"])
    v2_count = v2_ports_needed(shape["groups"], shape["slaves"])
    if same_shape and previous is not None and args.base_port is None:
        cluster_nodes = [n for n in previous.nodes if n.kind not in (CONSOLE, ETCD)]
        ports = [p for n in cluster_nodes for p in ((n.port, n.ha_port) if n.kind == BROKER
                                                    else (n.port,))]
        kept = [n.metrics_port for n in cluster_nodes]
        metrics_ports: list[int] = []
        if metrics_count and all(kept):
            metrics_ports = kept
        elif metrics_count:  # a layout from before metrics: new ports for them only
            metrics_ports = free_ports(metrics_count)
        kept_v2 = [n.v2_port for n in previous.brokers]
        # A layout from before the v2 endpoint: new ports for it only.
        v2_ports = kept_v2 if all(kept_v2) else free_ports(v2_count)
        kept_send = [n.send_port for n in previous.brokers]
        send_ports = kept_send if all(kept_send) else free_ports(v2_count)
        kept_remoting = [n.remoting_port for n in previous.brokers]
        remoting_ports = kept_remoting if all(kept_remoting) else free_ports(v2_count)
    else:
        # The gRPC and HA ports, then the metrics ports, then the brokers' v2, send and
        # remoting ports (so the ports of a --base-port stay where they were before).
        total = count + metrics_count + 3 * v2_count
        if args.base_port is None:
            pool = free_ports(total)
        elif args.base_port + total - 1 > 65535:
            raise LocalClusterError(f"--base-port {args.base_port}: {total} ports do not fit")
        else:
            pool = list(range(args.base_port, args.base_port + total))
        ports, metrics_ports = pool[:count], pool[count:count + metrics_count]
        v2_ports = pool[count + metrics_count:count + metrics_count + v2_count]
        send_ports = pool[count + metrics_count + v2_count:count + metrics_count + 2 * v2_count]
        remoting_ports = pool[count + metrics_count + 2 * v2_count:]
    requested = requested_namesrv_port(args)
    # --base-port lays out every port, the name server's too, unless a port is asked for.
    if args.base_port is None or args.namesrv_port:
        ports[0] = pick_namesrv_port(
            requested, ports[0], reused=same_shape and args.base_port is None,
            others={*ports[1:], *metrics_ports, *v2_ports, *send_ports, *remoting_ports})
    if requested and not port_is_free(requested):
        raise LocalClusterError(f"port {requested} (--namesrv-port or {NAMESRV_PORT_ENV}) is "
                                "taken; choose another, or 0 for any free port")
    layout = plan_layout(ports=ports, broker_props=props, cluster_name=DEFAULT_CLUSTER_NAME,
                         metrics_ports=metrics_ports, v2_ports=v2_ports,
                         send_ports=send_ports, remoting_ports=remoting_ports, **shape)
    if args.controller:  # an etcd member and a controller: their ports are any free ones
        etcd = [n for n in previous.nodes if n.kind == ETCD] if previous else []
        layout = with_controller(layout, [etcd[0].port, etcd[0].ha_port,
                                          previous.controller_port]
                                 if etcd and previous and previous.controller_port
                                 and same_shape else free_ports(3))
    used = [p for n in layout.nodes for p in n.ports]
    if len(set(used)) != len(used):
        raise LocalClusterError(f"--namesrv-port {requested} is also another process's port "
                                "in this layout; choose another")
    if args.console:
        layout = _with_console(layout, previous, same_shape and args.base_port is None)
    check_ports_free(layout)
    return layout


def _with_console(layout: Layout, previous: Layout | None, reuse: bool) -> Layout:
    """The layout with a web console (`up --console`) on the port it had, if free, else a
    free one."""
    used = {p for n in layout.nodes for p in n.ports}
    kept = next((n.port for n in previous.nodes if n.kind == CONSOLE), 0) if previous else 0
    port = kept if reuse and kept and kept not in used and port_is_free(kept) else 0
    while not port or port in used:
        port = free_ports(1)[0]
    return dataclasses.replace(layout, nodes=[*layout.nodes,
                                              Node(f"{CONSOLE}-0", CONSOLE, port)])


def _log_tail(directory: Path, record: ProcessRecord) -> str:
    lines = (directory / record.log).read_text(errors="replace").splitlines()
    return " | ".join(line.strip() for line in lines[-LOG_TAIL_LINES:])


def _wait_booted(directory: Path, started: list[tuple[ProcessRecord, int, str]],
                 deadline: float) -> None:
    """Waits for each process's boot line in its log (written after `offset`)."""
    pending = list(started)
    while pending:
        for item in list(pending):
            record, offset, boot_line = item
            with (directory / record.log).open("rb") as f:
                f.seek(offset)
                text = f.read().decode("utf-8", errors="replace")
            if any(line.startswith(boot_line) for line in text.splitlines()):
                pending.remove(item)
            elif not is_alive(record):
                tail = _log_tail(directory, record)
                if BAD_CONFIG_LINE in tail:  # a --set value it refused: a usage error
                    raise UsageError(f"{record.name} refused its configuration (log "
                                     f"{directory / record.log}): {tail}")
                raise LocalClusterError(f"{record.name} exited before it booted (log "
                                        f"{directory / record.log}): {tail}")
        if pending and time.monotonic() > deadline:
            names = ", ".join(r.name for r, _, _ in pending)
            raise LocalClusterError(f"{names} did not boot in time; see {directory / LOG_DIR}")
        if pending:
            time.sleep(POLL_S)


def _start_etcd(directory: Path, layout: Layout, nodes: list[Node],
                records: list[ProcessRecord], deadline: float,
                replace: dict[str, ProcessRecord] | None = None) -> None:
    """Starts the etcd member(s) of `up --controller` and waits until they answer healthy
    (`replace`: records of dead ones, restarted in place)."""
    for node in nodes:
        record, _ = spawn(node, directory, layout)
        old = (replace or {}).get(node.name)
        if old is not None:
            records[records.index(old)] = record
        else:
            records.append(record)
        save_state(directory, layout, records)
        while not _etcd_healthy(node):
            if not is_alive(record):
                raise LocalClusterError(f"{node.name} exited before it served: "
                                        f"{_log_tail(directory, record)}")
            if time.monotonic() > deadline:
                raise LocalClusterError(f"{node.name} did not serve in time; see "
                                        f"{directory / record.log}")
            time.sleep(POLL_S)


def _etcd_healthy(node: Node) -> bool:
    try:
        with urllib.request.urlopen(f"http://{node.address}/health", timeout=1) as r:
            return bool(json.loads(r.read()).get("health") == "true")
    except (OSError, ValueError):
        return False


def _tls_ca(layout: Layout) -> str | None:
    tls = client_tls(layout)
    return tls.ca_path if tls is not None else None


def _wait_registered(layout: Layout, deadline: float) -> None:
    """Until every name server lists every broker at its address."""
    expected = {(n.broker_name, n.broker_id, n.address) for n in layout.brokers}
    if layout.controller_port:  # the controller decides who is brokerId 0
        expected = {(n.broker_name, -1, n.address) for n in layout.brokers}
    for addr in layout.namesrv_addr.split(";"):
        with MQAdmin(addr, timeout=STATUS_RPC_TIMEOUT_S,
                     tls_ca=_tls_ca(layout)) as admin:
            while True:
                problem = ""
                try:
                    info = admin.cluster_info()
                    listed = {(g.broker_name, -1 if layout.controller_port else i, a)
                              for g in info.groups.values() for i, a in g.addrs.items()}
                    missing = expected - listed
                    if missing:
                        problem = f"name server {addr} does not list " + ", ".join(
                            f"{name}-{broker_id}" for name, broker_id, _ in sorted(missing))
                except AdminError as e:
                    problem = str(e)
                if not problem:
                    break
                if time.monotonic() > deadline:
                    raise LocalClusterError(problem)
                time.sleep(POLL_S)


def up(args: argparse.Namespace) -> int:
    directory = Path(args.dir).resolve()
    state = load_state(directory) if directory.exists() else None
    if state is not None:
        layout, records = state
        alive = [r for r in records if is_alive(r)]
        if alive:
            _refuse_new_options(args, directory, layout, restarting=len(alive) < len(records))
        if len(alive) == len(records):
            _out(f"{PROG}: the cluster in {directory} is already running; "
                 f"NAMESRV_ADDR={layout.namesrv_addr}\n"
                 + _access_hints(directory, layout).rstrip("\n"))
            return 0
        if alive:
            return _restart_dead(args, directory, layout, records)
        (directory / STATE_FILE).unlink()  # left by a cluster that is gone
    layout = resolve_layout(args, directory)
    directory.mkdir(parents=True, exist_ok=True)
    if args.acl:
        layout.broker_props.update(write_security(directory))
    if args.tls:
        try:
            layout.broker_props.update(write_tls(directory))
        except TlsError as e:
            raise LocalClusterError(str(e)) from None
    if layout.role == "SYNC_MASTER" and layout.slaves == 0:
        _out(f"{PROG}: warning: SYNC_MASTER without slaves answers SLAVE_NOT_AVAILABLE "
             "to every send")
    (directory / LOG_DIR).mkdir(exist_ok=True)
    for node in layout.brokers:
        (directory / node.name).mkdir(exist_ok=True)
        (directory / node.name / BROKER_CONF).write_text(broker_conf(layout, node, directory))
    write_json(directory / LAYOUT_FILE, layout.to_json())
    (directory / PROMETHEUS_FILE).write_text(prometheus_config(layout))
    records: list[ProcessRecord] = []
    deadline = time.monotonic() + args.timeout
    try:
        _start_etcd(directory, layout, [n for n in layout.nodes if n.kind == ETCD], records,
                    deadline)
        for kind_nodes, boot_line in (
                ([n for n in layout.nodes if n.kind == NAMESRV], NAMESRV_BOOT_SUCCESS_MESSAGE),
                (layout.brokers, BROKER_BOOT_SUCCESS_PREFIX),
                ([n for n in layout.nodes if n.kind == CONSOLE], CONSOLE_READY_PREFIX)):
            started = []
            for node in kind_nodes:
                record, offset = spawn(node, directory, layout)
                records.append(record)
                save_state(directory, layout, records)  # a failed up can still be downed
                started.append((record, offset, boot_line))
            _wait_booted(directory, started, deadline)
        _wait_registered(layout, deadline)
    except BaseException:
        stop_processes(records, STOP_TIMEOUT_S)
        (directory / STATE_FILE).unlink(missing_ok=True)
        raise
    if args.json:
        _out(dumps(_status_rows(directory, layout, records)))
        if note := _namesrv_note(args, layout):
            print(f"{PROG}: {note}", end="", file=sys.stderr, flush=True)
        return 0
    _print_status(directory, layout, records)
    _out(f"\nAll {len(layout.brokers)} broker(s) registered with {layout.namesrvs} name "
         f"server(s).\nNAMESRV_ADDR={layout.namesrv_addr}\n"
         + _namesrv_note(args, layout)
         + _access_hints(directory, layout) +
         f"Try:  mqadmin clusterList -n '{layout.namesrv_addr}'\n"
         + (f"Controller: mqadmin getSyncStateSet -a {layout.controller_addr}\n"
            if layout.controller_port else "")
         + (f"Metrics: the Metrics column; prometheus --config.file="
            f"{directory / PROMETHEUS_FILE} scrapes them all\n"
            if any(n.metrics_port for n in layout.nodes) else "") +
         f"Stop: {PROG} down --dir {args.dir}   (data kept; add --clean to remove it)")
    return 0


def _refuse_new_options(args: argparse.Namespace, directory: Path, layout: Layout,
                        restarting: bool) -> None:
    """On a cluster that runs (in whole or in part) the options shaping a new one are not
    applied: checked all the same (a bad --set is a usage error), then named on stderr."""
    given = given_shape_options(args)
    if not given:
        return
    if args.set:
        props = dict(layout.broker_props)
        props.update(_parse_sets(args.set))
        check_broker_props(dataclasses.replace(layout, broker_props=props), directory)
    what = "restarts its dead processes as they were" if restarting else "is already running"
    print(f"{PROG}: not applied: {', '.join(given)} (the cluster in {directory} {what}; run "
          f"`{PROG} down --dir {args.dir}` first, then up with them)", file=sys.stderr,
          flush=True)


def _namesrv_note(args: argparse.Namespace, layout: Layout) -> str:
    """Where the name server is when it is not at 9876 although nothing else was asked for:
    the examples' 127.0.0.1:9876 is then another program, or nothing."""
    first = next(n for n in layout.nodes if n.kind == NAMESRV)
    if first.port == DEFAULT_NAMESRV_PORT or args.base_port is not None \
            or requested_namesrv_port(args) is not None:
        return ""
    return (f"NOTE: port {DEFAULT_NAMESRV_PORT} was taken (another cluster or program "
            f"listens there), so this cluster's name server is at {first.address}, not at "
            f"the examples' 127.0.0.1:{DEFAULT_NAMESRV_PORT}: use -n '{layout.namesrv_addr}' "
            f"or export NAMESRV_ADDR='{layout.namesrv_addr}'\n")


def _access_hints(directory: Path, layout: Layout) -> str:
    """What mqadmin and clients need for this cluster's TLS / ACL (said at every up: a
    later `up` keeps them), before the hint to try mqadmin, which fails without them."""
    props = layout.broker_props
    hints = ""
    if client_tls(layout) is not None:
        hints += f"TLS on: export MQ_TLS_CA={props.get('tlsCaPath', '')}\n"
    if props.get("aclEnable", "").lower() == "true":
        hints += (f"ACL on: export $(cat {directory / SECURITY_DIR / CREDENTIALS_FILE}) for "
                  "mqadmin and clients\n")
    elif client_tls(layout) is None:
        hints += (f"RocketMQ 4.x clients: setNamesrvAddr(\"{layout.namesrv_addr}\") (the "
                  "same ports; docs/rocketmq4-clients.md)\n")
    for node in layout.nodes:
        if node.kind == CONSOLE:
            hints += (f"Console: http://{node.address}/"
                      + (" (sign in with that account)" if "ACL on" in hints else "") + "\n")
    return hints


def _restart_dead(args: argparse.Namespace, directory: Path, layout: Layout,
                  records: list[ProcessRecord]) -> int:
    """`up` on a cluster that runs in part: starts its dead processes again, as they were
    (same configs, ports and data), and waits until every broker is registered again."""
    nodes = {n.name: n for n in layout.nodes}
    dead = [r for r in records if not is_alive(r)]
    _out(f"{PROG}: restarting {', '.join(r.name for r in dead)} of the cluster in {directory}")
    deadline = time.monotonic() + args.timeout
    dead_etcd = [r for r in dead if nodes[r.name].kind == ETCD]
    _start_etcd(directory, layout, [nodes[r.name] for r in dead_etcd], records, deadline,
                replace={r.name: r for r in dead_etcd})
    for group, boot_line in (([r for r in dead if nodes[r.name].kind == NAMESRV],
                              NAMESRV_BOOT_SUCCESS_MESSAGE),
                             ([r for r in dead if nodes[r.name].kind == BROKER],
                              BROKER_BOOT_SUCCESS_PREFIX),
                             ([r for r in dead if nodes[r.name].kind == CONSOLE],
                              CONSOLE_READY_PREFIX)):
        started = []
        for old in group:
            record, offset = spawn(nodes[old.name], directory, layout)
            records[records.index(old)] = record
            save_state(directory, layout, records)
            started.append((record, offset, boot_line))
        _wait_booted(directory, started, deadline)
    _wait_registered(layout, deadline)
    _print_status(directory, layout, records)
    _out((f"NAMESRV_ADDR={layout.namesrv_addr}\n" + _access_hints(directory, layout)
          ).rstrip("\n"))
    return 0


# -- status / down -----------------------------------------------------------------------------
def _registered(layout: Layout) -> set[str] | None:
    """Broker addresses the first answering name server lists; None when none answers."""
    try:
        with MQAdmin(layout.namesrv_addr, timeout=STATUS_RPC_TIMEOUT_S,
                     tls_ca=_tls_ca(layout)) as admin:
            info = admin.cluster_info()
    except AdminError:
        return None
    return {a for g in info.groups.values() for a in g.addrs.values()}


def _status_rows(directory: Path, layout: Layout, records: list[ProcessRecord]
                 ) -> list[dict[str, Any]]:
    nodes = {n.name: n for n in layout.nodes}
    registered = _registered(layout)
    rows = []
    for r in records:
        node = nodes[r.name]
        rows.append({
            "name": r.name, "kind": node.kind, "pid": r.pid, "address": node.address,
            "ha_port": node.ha_port or None,
            "metrics": f"http://{node.metrics_address}/metrics" if node.metrics_port else None,
            "alive": is_alive(r), "stopped": is_stopped(r),
            "role": ("ETCD" if node.kind == ETCD else None) if node.kind != BROKER
            else "CONTROLLER-MODE" if layout.controller_port
            else layout.role if node.broker_id == 0 else "SLAVE",
            "registered": (node.address in registered if registered is not None else None)
            if node.kind == BROKER else None,
            "log": str(directory / r.log)})
    return rows


def _print_status(directory: Path, layout: Layout, records: list[ProcessRecord]) -> bool:
    rows = _status_rows(directory, layout, records)

    def registered(value: bool | None, kind: str) -> str:
        return "-" if kind != BROKER else {True: "yes", False: "no", None: "?"}[value]

    _out(f"cluster {layout.cluster_name} in {directory}")
    _out(table(["Process", "Role", "PID", "Address", "HA Port", "Metrics", "State",
                "Registered", "Log"],
               [[r["name"], r["role"] or r["kind"].upper(), r["pid"], r["address"],
                 r["ha_port"] or "-",
                 r["metrics"] or "-",
                 ("stopped" if r["stopped"] else "alive") if r["alive"] else "DEAD",
                 registered(r["registered"], r["kind"]),
                 Path(r["log"]).relative_to(directory)] for r in rows]))
    return all(r["alive"] for r in rows)


def status(args: argparse.Namespace) -> int:
    directory = Path(args.dir).resolve()
    state = load_state(directory)
    if state is None:
        if args.json:
            _out(dumps([]))
        else:
            _out(f"no cluster is running in {directory} (no {STATE_FILE})")
        return EXIT_FAILURE
    layout, records = state
    if args.json:
        rows = _status_rows(directory, layout, records)
        _out(dumps(rows))
        return 0 if all(r["alive"] for r in rows) else EXIT_FAILURE
    all_alive = _print_status(directory, layout, records)
    _out(f"NAMESRV_ADDR={layout.namesrv_addr}")
    return 0 if all_alive else EXIT_FAILURE


def external_store_dirs(directory: Path, layout: Layout) -> list[Path]:
    """Store directories the brokers were given outside the cluster directory (--set
    storePathRootDir=...; a relative one is under the directory, the brokers' cwd)."""
    root = layout.broker_props.get(STORE_ROOT_KEY, "").strip()
    if not root:
        return []
    path = (directory / Path(root).expanduser()).resolve()
    return [] if path.is_relative_to(directory) else [path]


def _clean(directory: Path) -> list[Path]:
    """Removes what `up` created in the directory (configs, stores, logs), nothing else;
    returns the data directories outside it, which are kept."""
    data = read_json(directory / LAYOUT_FILE)
    kept: list[Path] = []
    if data is not None:
        layout = Layout.from_json(data)
        kept = external_store_dirs(directory, layout)
        for node in layout.nodes:
            if node.kind in (BROKER, ETCD):  # their stores and etcd's data
                shutil.rmtree(directory / node.name, ignore_errors=True)
    shutil.rmtree(directory / LOG_DIR, ignore_errors=True)
    shutil.rmtree(directory / SECURITY_DIR, ignore_errors=True)
    (directory / LAYOUT_FILE).unlink(missing_ok=True)
    (directory / PROMETHEUS_FILE).unlink(missing_ok=True)
    try:
        directory.rmdir()
    except OSError:
        pass  # other files are in it: not ours to remove
    return kept


def down(args: argparse.Namespace) -> int:
    directory = Path(args.dir).resolve()
    state = load_state(directory)
    if state is None:
        _out(f"no cluster is running in {directory}")
    else:
        layout, records = state
        brokers = [r for r in records if r.name in {n.name for n in layout.brokers}]
        others = [r for r in records if r not in brokers]
        # Brokers first, so that they unregister from name servers that still run.
        stopped, killed = stop_processes(brokers, args.timeout)
        s2, k2 = stop_processes(others, args.timeout)
        (directory / STATE_FILE).unlink(missing_ok=True)
        _out(f"stopped {stopped + s2} process(es)"
             + (f", {killed + k2} of them with SIGKILL" if killed + k2 else "")
             + f" of the cluster in {directory}")
    if args.clean:
        kept = _clean(directory)
        left = sorted(p.name for p in directory.iterdir()) if directory.is_dir() else []
        _out(f"removed the data, configs and logs in {directory}"
             + (f" (kept what mqcluster did not create: {', '.join(left)})" if left else ""))
        for path in kept:
            _out(f"kept the brokers' data in {path} (--set {STORE_ROOT_KEY}: outside "
                 f"{directory}, not removed by --clean; remove it yourself if it is not "
                 "needed)")
    return 0


# -- arguments ---------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description="A local cluster of name servers "
                                     "and brokers on loopback.")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--dir", default=DEFAULT_DIR,
                        help=f"directory of configs, data, logs and state (default {DEFAULT_DIR})")
    common.add_argument("--timeout", type=seconds(MAX_TIMEOUT_S), default=None,
                        help=f"seconds to wait (up: {BOOT_TIMEOUT_S:.0f}, down: "
                             f"{STOP_TIMEOUT_S:.0f} before SIGKILL)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    p = sub.add_parser("up", parents=[common], help="start the cluster")
    p.add_argument("--groups", type=int_range(1, MAX_GROUPS),
                   help=f"broker groups, 1..{MAX_GROUPS} (default 1)")
    p.add_argument("--slaves", type=int_range(0, MAX_SLAVES),
                   help=f"slaves per group, 0..{MAX_SLAVES} (default 0)")
    p.add_argument("--namesrvs", type=int_range(1, MAX_NAMESRVS),
                   help=f"name servers, 1..{MAX_NAMESRVS} (default 1)")
    p.add_argument("--base-port", type=port_number, help="first port (default: free ports)")
    p.add_argument("--namesrv-port", type=port_or_any, metavar="PORT",
                   help=f"the (first) name server's port (default ${NAMESRV_PORT_ENV}, else "
                        f"{DEFAULT_NAMESRV_PORT} when free, else a free port; 0: any free "
                        "port)")
    p.add_argument("--flush", choices=FLUSH_TYPES, help="flushDiskType (default ASYNC_FLUSH)")
    p.add_argument("--role", choices=MASTER_ROLES, help="masters' brokerRole "
                   "(default ASYNC_MASTER)")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", type=key_value,
                   help="extra broker.conf key for every broker (repeatable)")
    p.add_argument("--no-metrics", dest="metrics", action="store_false",
                   help="no Prometheus /metrics ports (default: one per process)")
    p.add_argument("--acl", action="store_true",
                   help="access control on: a cluster key for registrations and HA links, "
                        "and an admin account (credentials in DIR/security/credentials.env)")
    p.add_argument("--tls", action="store_true",
                   help="TLS on the gRPC and HA ports with a local CA (DIR/security/tls; "
                        "clients: MQ_TLS_CA=DIR/security/tls/ca.pem)")
    p.add_argument("--console", action="store_true",
                   help="also start the web console (mqconsole) on a free loopback port")
    p.add_argument("--controller", action="store_true",
                   help="controller mode: an etcd member and a controller (in the first name "
                        "server) elect each group's master; --role is the master's role")
    p.add_argument("--json", action="store_true", help="print the processes as JSON")
    p.set_defaults(run=up, default_timeout=BOOT_TIMEOUT_S)
    p = sub.add_parser("status", parents=[common], help="show each process alive or dead")
    p.add_argument("--json", action="store_true")
    p.set_defaults(run=status, default_timeout=STATUS_RPC_TIMEOUT_S)
    p = sub.add_parser("down", parents=[common], help="stop the cluster's processes")
    p.add_argument("--clean", action="store_true", help="also remove data, configs and logs")
    p.set_defaults(run=down, default_timeout=STOP_TIMEOUT_S)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.timeout is None:
        args.timeout = args.default_timeout
    try:
        return int(args.run(args))
    except BrokenPipeError:  # `mqcluster status | head`: the reader had enough (as mqadmin)
        return stdout_closed()
    except UsageError as e:
        print(f"{PROG} {args.command}: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except (LocalClusterError, OSError) as e:
        print(f"{PROG} {args.command}: {e}", file=sys.stderr)
        return EXIT_FAILURE
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except Exception as e:  # a bug or an error no handler expected: one line, not a trace
        return unexpected(f"{PROG} {args.command}", e)


if __name__ == "__main__":
    sys.exit(main())
