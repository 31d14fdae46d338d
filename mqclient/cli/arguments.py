"""Argument types the command-line tools share (argparse `type=`): a bad value is a usage
error naming it, exit 2."""

from __future__ import annotations

import argparse
from collections.abc import Callable


def port_number(text: str) -> int:
    return _port(text, 1)


def port_or_any(text: str) -> int:
    """A port, or 0 for any free port."""
    return _port(text, 0)


def _port(text: str, lowest: int) -> int:
    value = int(text)
    if not lowest <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{text} is not a port")
    return value


def at_least(minimum: int) -> Callable[[str], int]:
    """A whole number >= `minimum`."""
    def parse(text: str) -> int:
        value = int(text)
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{text} is below {minimum}")
        return value
    return parse
