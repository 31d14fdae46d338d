"""How the command-line tools end on what they did not expect: one line on stderr naming
the exception's type, exit 1, never a traceback (unless $MQ_DEBUG is set); and a reader
that closed the pipe (`... | head`) is not an error."""

from __future__ import annotations

import os
import sys
import traceback

DEBUG_ENV = "MQ_DEBUG"  # MQ_DEBUG=1: the traceback too, for a bug report
EXIT_FAILURE = 1


def unexpected(prog: str, error: BaseException) -> int:
    """One stderr line for an error no handler expected; EXIT_FAILURE."""
    if os.environ.get(DEBUG_ENV, "").strip() not in ("", "0"):
        traceback.print_exception(error, file=sys.stderr)
    text = " ".join(str(error).split()) or "(no message)"
    print(f"{prog}: unexpected error: {type(error).__name__}: {text} (set {DEBUG_ENV}=1 for "
          "the traceback)", file=sys.stderr, flush=True)
    return EXIT_FAILURE


def stdout_closed() -> int:
    """After a BrokenPipeError on stdout: the reader had enough (`| head`). Python would
    report the pipe again when it flushes stdout at exit, so stdout goes to /dev/null; 0."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError):
        pass  # no real stdout (captured): nothing will be flushed to a pipe
    return 0
