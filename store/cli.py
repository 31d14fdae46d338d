"""`mqstore`: the store's command-line tools behind one console script.

    mqstore inspect STORE_DIR [--json] [--commitlog-file-size N] [--cq-file-size N] ...

A console script, unlike `python -m store.inspect`, works from any directory: run from a
broker's data directory, which holds a `store/` folder, `python -m` imports that folder
instead of this package (the current directory comes first on sys.path) and fails.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

COMMANDS = {
    "inspect": "verify a store directory read-only (exit 0 clean, 1 problems, 2 usage)",
}


def _usage() -> str:
    lines = ["usage: mqstore COMMAND [ARGS...]", "", "commands:"]
    lines += [f"  {name:<10} {text}" for name, text in COMMANDS.items()]
    lines.append("\n`mqstore COMMAND --help` describes a command's arguments.")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(_usage(), file=sys.stdout if args else sys.stderr)
        return 0 if args else 2
    command, rest = args[0], args[1:]
    if command == "inspect":
        from store import inspect

        return inspect.main(rest, prog="mqstore inspect")
    print(f"mqstore: unknown command {command!r}\n\n{_usage()}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
