"""`mqchaos`: a failover checker in the manner of OpenMessaging Chaos and Jepsen.

    mqchaos run --scenario NAME [--target local|compose] [--duration S] [--out DIR] ...
    mqchaos check HISTORY [--scenario NAME] [--out DIR] [--json]
    mqchaos scenarios

Exit codes: 0 the scenario passed (check: the history is valid), 1 it did not, 2 bad
arguments, 3 the run could not be carried out (no cluster, a cluster of the wrong shape...).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from chaos import report
from chaos.compose_target import COMPOSE_SERVICES, DEFAULT_PROJECT
from chaos.constants import CHART_FILE, RESULT_FILE, SUMMARY_FILE
from chaos.faults import FaultError
from chaos.history import HistoryError, read_history
from chaos.operations import run_info
from chaos.runner import RunError, RunOptions, evaluate, run
from chaos.scenarios import SCENARIOS
from mqclient.cli.errors import stdout_closed

PROG = "mqchaos"
EXIT_FAILED = 1
EXIT_CANNOT_RUN = 3
DEFAULT_OUT_ROOT = "mqchaos-runs"


def _services(items: Sequence[str] | None) -> dict[str, str]:
    """--service NODE=SERVICE items over compose/docker-compose.yml's services."""
    out = dict(COMPOSE_SERVICES)
    for item in items or ():
        node, sep, service = item.partition("=")
        if not sep or not node or not service:
            raise argparse.ArgumentTypeError(f"--service {item!r}: expected NODE=SERVICE")
        out[node] = service
    return out


def cmd_run(args: argparse.Namespace) -> int:
    scenario = SCENARIOS[args.scenario]
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out = Path(args.out) if args.out else Path(DEFAULT_OUT_ROOT) / f"{scenario.name}-{stamp}"
    options = RunOptions(
        scenario=scenario, out_dir=out, target=args.target, duration_s=args.duration,
        cluster_dir=Path(args.cluster_dir) if args.cluster_dir else None,
        keep_cluster=args.keep_cluster, keep_topics=args.keep_topics,
        namesrv_addr=args.namesrv,
        compose_project=args.compose_project, compose_services=_services(args.service),
        producers=args.producers, ordered_producers=args.ordered_producers,
        consumers=args.consumers, rate=args.rate, consume_ratio=args.consume_ratio,
        max_messages=args.max_messages,
        body_size=args.body_size, progress=None if args.quiet else sys.stderr)
    print(f"{PROG}: {scenario.description}; output in {out}", file=sys.stderr, flush=True)
    result = run(options)
    print(report.summary(result))
    print(f"history {out / 'history.jsonl'}, result {out / RESULT_FILE}, chart {out / CHART_FILE}")
    return 0 if result["scenario"]["passed"] else EXIT_FAILED


def cmd_check(args: argparse.Namespace) -> int:
    path = Path(args.history)
    entries = read_history(path)
    name = args.scenario or run_info(entries).get("scenario")
    scenario = SCENARIOS.get(name) if name else None
    result = evaluate(entries, scenario)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / RESULT_FILE).write_text(json.dumps(result, indent=2) + "\n")
        (out / SUMMARY_FILE).write_text(report.summary(result) + "\n")
        report.chart(entries, result, out / CHART_FILE)
    print(json.dumps(result, indent=2) if args.json else report.summary(result))
    passed = result["scenario"]["passed"] if scenario is not None else result["valid"]
    return 0 if passed else EXIT_FAILED


def cmd_scenarios(args: argparse.Namespace) -> int:
    for s in SCENARIOS.values():
        steps = "; ".join(f"{st.action} {st.fault} {st.node} at {st.at:.0%}" for st in s.steps)
        compose = ("compose/compose.sh --async up -d" if s.shape.role == "ASYNC_MASTER"
                   else "compose/compose.sh up -d")
        local = ("(local: none, it cuts the network)"
                 if any(st.fault == "disconnect" for st in s.steps)
                 else f"or mqcluster up {' '.join(s.shape.mqcluster_args())}")
        print(f"{s.name:24} {s.description}\n{'':24} cluster: {compose} {local}; {steps}; "
              f"default {s.duration_s:.0f} s")
    return 0


MAX_THREADS = 256  # --producers, --ordered-producers, --consumers
MAX_BODY_SIZE = 4 * 1024 * 1024  # the brokers' default maxMessageSize
MAX_DURATION_S = 86_400.0
MAX_COUNT = 2**63 - 1


def _number(kind: type, text: str) -> float:
    try:
        value = kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text} is not a finite number")
    return value


def _positive(kind: type, maximum: float = MAX_COUNT) -> object:
    """0 or more, at most `maximum`."""
    def parse(text: str) -> object:
        value = _number(kind, text)
        if value < 0:
            raise argparse.ArgumentTypeError(f"{text} is negative")
        if value > maximum:
            raise argparse.ArgumentTypeError(f"{text} is above {maximum:g}")
        return value
    return parse


def _above_zero(kind: type, maximum: float = MAX_COUNT) -> object:
    def parse(text: str) -> object:
        value = _number(kind, text)
        if not 0 < value <= maximum:
            raise argparse.ArgumentTypeError(f"{text}: must be above 0 and at most "
                                             f"{maximum:g}")
        return value
    return parse


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description="Runs a workload against a "
                                     "cluster while breaking it, then checks what survived.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    p = sub.add_parser("run", help="run a scenario and check it")
    p.add_argument("--scenario", required=True, choices=sorted(SCENARIOS))
    p.add_argument("--target", choices=("local", "compose"), default="local",
                   help="local: an mqcluster (faults by signals); compose: the compose "
                        "cluster (faults through the Docker API)")
    p.add_argument("--duration", type=_above_zero(float, MAX_DURATION_S),
                   help="send phase in seconds (default: the scenario's)")
    p.add_argument("--out", help=f"run directory (default {DEFAULT_OUT_ROOT}/NAME-TIME)")
    p.add_argument("--cluster-dir", help="local: a running mqcluster directory to use (left "
                   "running); without it mqchaos starts one in OUT/cluster and stops it")
    p.add_argument("--keep-cluster", action="store_true",
                   help="local: leave the cluster mqchaos started running")
    p.add_argument("--keep-topics", action="store_true",
                   help="leave the run's topics and consumer groups (ChaosPlain-ID, "
                        "chaos-plain-ID, ...) in the cluster; by default they are deleted at "
                        "the end, so that later lag reports do not show them")
    p.add_argument("--namesrv", help="compose: name server addresses as the host reaches "
                   "them, 'HOST:PORT;HOST:PORT' (default: the name servers' published ports)")
    p.add_argument("--compose-project",
                   default=os.environ.get("COMPOSE_PROJECT_NAME") or DEFAULT_PROJECT,
                   help=f"compose: the project name, as given to compose -p (default "
                        f"$COMPOSE_PROJECT_NAME, else {DEFAULT_PROJECT}, as compose/compose.sh; "
                        "lower-cased as compose does)")
    p.add_argument("--service", action="append", metavar="NODE=SERVICE",
                   help="compose: the service of a node, e.g. namesrv-0=namesrv1 "
                        "(repeatable; default: compose/docker-compose.yml's services)")
    p.add_argument("--producers", type=_positive(int, MAX_THREADS), default=4,
                   help="plain producer threads (default 4)")
    p.add_argument("--ordered-producers", type=_positive(int, MAX_THREADS),
                   help="ordered producer threads (default: the scenario's)")
    p.add_argument("--consumers", type=_positive(int, MAX_THREADS), default=2,
                   help="consumers per group (default 2)")
    p.add_argument("--rate", type=_positive(float), help="sends per second over all threads "
                   "(0: as fast as they go; default: the scenario's)")
    p.add_argument("--consume-ratio", type=_positive(float),
                   help="consumers take at most this share of the send rate and of the "
                        "messages acknowledged so far during the send phase, so a backlog "
                        "builds up (0: no limit; default: the scenario's)")
    p.add_argument("--max-messages", type=_positive(int), default=100_000,
                   help="the send phase ends after this many sends (default 100000)")
    p.add_argument("--body-size", type=_positive(int, MAX_BODY_SIZE), default=256,
                   help=f"bytes, at most {MAX_BODY_SIZE} (default 256)")
    p.add_argument("--quiet", action="store_true", help="no progress line")
    p.set_defaults(run=cmd_run)
    p = sub.add_parser("check", help="check a kept history again")
    p.add_argument("history")
    p.add_argument("--scenario", choices=sorted(SCENARIOS),
                   help="judge by this scenario (default: the one the history names)")
    p.add_argument("--out", help="also write result.json, summary.txt and chart.png here")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(run=cmd_check)
    p = sub.add_parser("scenarios", help="list the scenarios")
    p.set_defaults(run=cmd_scenarios)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    # The client library's lines go to the run's client.log (runner.py); mqchaos's own
    # warnings to stderr.
    stderr = logging.StreamHandler()
    stderr.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    stderr.setLevel(logging.WARNING)
    logging.getLogger("chaos").addHandler(stderr)
    logging.getLogger("chaos").propagate = True
    try:
        return int(args.run(args))
    except argparse.ArgumentTypeError as e:
        parser.error(str(e))
    except BrokenPipeError:  # `mqchaos ... | head`: the reader had enough
        return stdout_closed()
    except (RunError, FaultError, HistoryError, OSError) as e:
        print(f"{PROG} {args.command}: {e}", file=sys.stderr)
        return EXIT_CANNOT_RUN
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
