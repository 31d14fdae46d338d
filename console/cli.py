"""`mqconsole --namesrv ADDR [--listen 127.0.0.1:8080] [--analytics DIR] [--chaos DIR]`."""

from __future__ import annotations

import argparse
import ipaddress
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from common.constants import CONSOLE_READY_PREFIX
from console.backend import DEFAULT_BUDGET_S

PROG = "mqconsole"
DEFAULT_LISTEN = "127.0.0.1:8080"
READY_LINE = CONSOLE_READY_PREFIX  # printed once the port is bound, with the URL


def split_listen(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) < 65536:
        raise argparse.ArgumentTypeError(f"{text!r}: expected HOST:PORT")
    return host.strip("[]") or "127.0.0.1", int(port)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description="The cluster's web console.")
    p.add_argument("-n", "--namesrv", default=os.environ.get("NAMESRV_ADDR"),
                   help="name server(s), host:port;host:port (default $NAMESRV_ADDR)")
    p.add_argument("--listen", type=split_listen, default=split_listen(DEFAULT_LISTEN),
                   metavar="HOST:PORT", help=f"where to serve (default {DEFAULT_LISTEN}; "
                   "port 0: a free port)")
    p.add_argument("--analytics", type=Path, metavar="DIR",
                   help="the lag analytics' output directory (spark_analytics.lag --out)")
    p.add_argument("--chaos", type=Path, metavar="DIR", help="mqchaos results (--out) to show")
    p.add_argument("--login", action="store_true",
                   help="the cluster has aclEnable: each user signs in with an account")
    p.add_argument("--budget", type=float, default=DEFAULT_BUDGET_S, metavar="SECONDS",
                   help=f"how long one broker may take to answer (default {DEFAULT_BUDGET_S})")
    p.add_argument("--allow-remote", action="store_true",
                   help="allow listening on an address other than loopback")
    p.add_argument("--tls-ca", default=None, help="CA of TLS servers (default $MQ_TLS_CA)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if not args.namesrv:
        print(f"{PROG}: give --namesrv HOST:PORT or set NAMESRV_ADDR", file=sys.stderr)
        return 2
    host, port = args.listen
    if not is_loopback(host) and not args.allow_remote:
        print(f"{PROG}: {host} is not a loopback address; the console changes the cluster: "
              "pass --allow-remote to serve it there", file=sys.stderr)
        return 2
    if not 0 < args.budget <= 1.0:
        print(f"{PROG}: --budget must be in (0, 1] seconds", file=sys.stderr)
        return 2
    # The lag tables may come later (the console reads them when they are there); the
    # chaos results are read as they are.
    for flag, directory, must_exist in (("--analytics", args.analytics, False),
                                        ("--chaos", args.chaos, True)):
        if directory is not None and (directory.exists() or must_exist) \
                and not directory.is_dir():
            print(f"{PROG}: {flag} {directory}: not a directory", file=sys.stderr)
            return 2
    try:
        import uvicorn

        from console.app import ConsoleConfig, create_app
    except ImportError as e:
        print(f"{PROG}: the console's web stack is missing ({e}): pip install "
              "'pyrocketmq-cluster[console]'", file=sys.stderr)
        return 2
    app = create_app(ConsoleConfig(args.namesrv, budget_s=args.budget,
                                   analytics_dir=args.analytics, chaos_dir=args.chaos,
                                   login=args.login, tls_ca=args.tls_ca))
    config = uvicorn.Config(app, host=host, port=port, log_level="warning",
                            access_log=False, lifespan="on")
    server = uvicorn.Server(config)
    serve(server)
    return 0


def serve(server: object) -> None:
    """Runs the server; prints READY_LINE with the URL once its socket is bound."""
    import asyncio

    import uvicorn

    assert isinstance(server, uvicorn.Server)

    async def run() -> None:
        task = asyncio.ensure_future(server.serve())
        while not server.started and not task.done():
            await asyncio.sleep(0.05)
        if server.started:
            for s in server.servers:
                for sock in s.sockets:
                    host, port = sock.getsockname()[:2]
                    shown = f"[{host}]" if ":" in host else host
                    print(f"{READY_LINE} http://{shown}:{port}/", flush=True)
                    break
                break
        await task

    asyncio.run(run())
