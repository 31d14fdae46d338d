"""Argument types the command-line tools share (argparse `type=`): a bad value is a usage
error naming it, exit 2."""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable

INT32_MAX = 2**31 - 1  # queue ids and queue counts (int32 in the protocol, Java int)
INT64_MAX = 2**63 - 1  # offsets, broker ids, epoch ms (int64, Java long)
MAX_TIMEOUT_S = 3600.0  # the longest --timeout of an RPC or a wait
# A host: a name or IPv4 (letters, digits, '.', '-', '_') or an IPv6 literal in brackets.
_HOST = re.compile(r"[A-Za-z0-9_]([A-Za-z0-9._-]*[A-Za-z0-9_])?|\[[0-9A-Fa-f:.]+\]")
OFFSET_MSG_ID_HEX_DIGITS = (32, 56)  # IPv4 or IPv6 store host + port + commitlog offset


def _whole_number(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None


def port_number(text: str) -> int:
    return _port(text, 1)


def port_or_any(text: str) -> int:
    """A port, or 0 for any free port."""
    return _port(text, 0)


def _port(text: str, lowest: int) -> int:
    value = _whole_number(text)
    if not lowest <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{text} is not a port ({lowest}..65535)")
    return value


def int_range(minimum: int, maximum: int) -> Callable[[str], int]:
    """A whole number in [minimum, maximum]."""
    def parse(text: str) -> int:
        value = _whole_number(text)
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{text} is below {minimum}")
        if value > maximum:
            raise argparse.ArgumentTypeError(f"{text} is above {maximum}")
        return value
    return parse


def at_least(minimum: int, maximum: int = INT64_MAX) -> Callable[[str], int]:
    """A whole number >= `minimum` (and <= `maximum`, by default the largest int64: what
    the protocol carries)."""
    return int_range(minimum, maximum)


def seconds(maximum: float = MAX_TIMEOUT_S) -> Callable[[str], float]:
    """A duration in seconds: positive, finite, at most `maximum` (a timeout of 0, -1, nan
    or 1e308 is a mistake, not a wait)."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
        if not math.isfinite(value) or not 0 < value <= maximum:
            raise argparse.ArgumentTypeError(
                f"{text}: expected seconds above 0 and at most {maximum:g}")
        return value
    return parse


def host_port(text: str) -> str:
    """HOST:PORT, the port 1..65535."""
    address = text.strip()
    host, sep, port = address.rpartition(":")
    if not sep or not _HOST.fullmatch(host) or not port.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not HOST:PORT")
    if not 1 <= int(port) <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r}: port {port} is not 1..65535")
    return address


def host_port_list(text: str) -> str:
    """HOST:PORT;HOST:PORT (RocketMQ's namesrvAddr), at least one; given back as written
    (the address parsers of the clients take it)."""
    items = [a for a in text.split(";") if a.strip()]
    if not items:
        raise argparse.ArgumentTypeError("empty: expected HOST:PORT[;HOST:PORT...]")
    for item in items:
        host_port(item)
    return text


def offset_msg_id(text: str) -> str:
    """An offsetMsgId: 32 (IPv4 store host) or 56 (IPv6) hex digits."""
    value = text.strip()
    if len(value) not in OFFSET_MSG_ID_HEX_DIGITS or not all(
            c in "0123456789abcdefABCDEF" for c in value):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an offsetMsgId (32 or 56 hex digits)")
    return value
