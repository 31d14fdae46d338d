"""Health check of a broker: registered with every name server at the address it advertises.

    python -m broker.healthcheck --broker-name NAME --broker-id ID --addr HOST:PORT
                                 [-n NAMESRV_ADDR] [--timeout SECONDS]

Asks each name server (-n `HOST:PORT;HOST:PORT`, default env NAMESRV_ADDR) for its cluster
table. Exit 0 when every one lists HOST:PORT as brokerId ID of group NAME, else 1 with the
name servers that do not on one line of stdout (Docker keeps it in the health log). The
compose cluster's brokers use it; a broker that lost one name server is unhealthy until it
registers there again (at most registerNameServerPeriod, 30 s, after it is back).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from nameserver.healthcheck import cluster_info

DEFAULT_TIMEOUT_S = 3.0


def registration_problem(namesrv_addr: str, broker_name: str, broker_id: int, addr: str,
                         timeout_s: float) -> str:
    """"" when the name server at `namesrv_addr` lists `addr` as `broker_name`/`broker_id`;
    else what it lists instead, or why it could not be asked."""
    r, problem = cluster_info(namesrv_addr, timeout_s)
    if r is None:
        return f"{namesrv_addr}: {problem}"
    group = r.cluster_info.broker_addr_table.get(broker_name)
    registered = group.broker_addrs.get(broker_id, "") if group is not None else ""
    if registered != addr:
        return f"{namesrv_addr}: {broker_name}/{broker_id} is {registered or 'not registered'}"
    return ""


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m broker.healthcheck",
        description="Exit 0 when the broker is registered with every name server.")
    parser.add_argument("-n", "--namesrv-addr", default=os.environ.get("NAMESRV_ADDR", ""),
                        help="HOST:PORT;HOST:PORT (default: env NAMESRV_ADDR)")
    parser.add_argument("--broker-name", required=True)
    parser.add_argument("--broker-id", type=int, required=True)
    parser.add_argument("--addr", required=True,
                        help="the broker's advertised address, brokerIP1:listenPort")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S,
                        help=f"seconds per name server (default {DEFAULT_TIMEOUT_S:g})")
    args = parser.parse_args(argv)
    namesrvs = [a.strip() for a in args.namesrv_addr.split(";") if a.strip()]
    if not namesrvs:
        parser.error("no name server: give -n or set NAMESRV_ADDR")
    problems = [p for p in (registration_problem(n, args.broker_name, args.broker_id,
                                                 args.addr, args.timeout) for n in namesrvs)
                if p]
    if problems:
        print(f"{args.broker_name}/{args.broker_id} at {args.addr} not registered with "
              f"every name server: {'; '.join(problems)}")
        return 1
    print(f"{args.broker_name}/{args.broker_id} at {args.addr} registered with "
          f"{len(namesrvs)} name servers")
    return 0


if __name__ == "__main__":
    sys.exit(main())
