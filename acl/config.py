"""The account file: RocketMQ 4.x `plain_acl.yml` layout, in YAML or JSON.

    globalWhiteRemoteAddresses: [127.0.0.1, 10.0.*.*]   # empty = any address
    accounts:
      - accessKey: producer1
        secretKey: 12345678
        admin: false
        defaultTopicPerm: DENY        # for topics not listed (default DENY)
        defaultGroupPerm: SUB         # for groups not listed (default DENY)
        whiteRemoteAddress: ""        # optional: this account only from these addresses
        topicPerms: [orders=PUB, audit=PUB|SUB, secret=DENY]
        groupPerms: [billing=SUB]

Permissions are PUB, SUB, PUB|SUB (also SUB|PUB) and DENY; a group needs SUB. Unlike
RocketMQ, a global white address does not skip the signature: the list says which client
addresses may call at all (the issue's allow-list); everything else is refused.
"""

from __future__ import annotations

import dataclasses
import enum
import ipaddress
import json
import re
from pathlib import Path
from typing import Any

MAX_ACL_FILE_BYTES = 4 << 20
MAX_KEY_LENGTH = 256
MIN_SECRET_LENGTH = 6
_KEY_RE = re.compile(r"^[A-Za-z0-9_\-.@:]+$")


class AclConfigError(ValueError):
    """The account file cannot be used; the message says where and why."""


class Perm(enum.IntFlag):
    DENY = 1
    PUB = 2
    SUB = 4

    @property
    def label(self) -> str:
        if self & Perm.DENY:
            return "DENY"
        return "|".join(p.name for p in (Perm.PUB, Perm.SUB) if self & p and p.name) or "NONE"


def parse_perm(text: str, where: str) -> Perm:
    words = [w.strip().upper() for w in str(text).split("|")]
    perm = Perm(0)
    for w in words:
        if w == "DENY":
            if len(words) > 1:
                raise AclConfigError(f"{where}: DENY cannot be combined, got {text!r}")
            return Perm.DENY
        if w not in ("PUB", "SUB"):
            raise AclConfigError(f"{where}: expected PUB, SUB, PUB|SUB or DENY, got {text!r}")
        perm |= Perm[w]
    return perm


class AddressPattern:
    """RocketMQ's remote address forms: `*` (any), an IP, `10.0.*.*`, `10.0.1.1-20`
    (a range in the last part), `10.0.1.{1,5,9}`, or a CIDR network `10.0.0.0/8`."""

    def __init__(self, text: str) -> None:
        self.text = text.strip()
        if not self.text:
            raise AclConfigError("empty address pattern")
        self._net: ipaddress.IPv4Network | ipaddress.IPv6Network | None = None
        self._parts: list[set[int] | None] = []
        if self.text == "*":
            return
        if "/" in self.text or ":" in self.text:
            try:
                self._net = ipaddress.ip_network(self.text, strict=False)
            except ValueError:
                raise AclConfigError(f"bad address pattern {self.text!r}") from None
            return
        parts = self.text.split(".")
        if len(parts) != 4:
            raise AclConfigError(f"bad address pattern {self.text!r} (expected a.b.c.d)")
        for p in parts:
            self._parts.append(self._part(p))

    def _part(self, p: str) -> set[int] | None:
        try:
            if p == "*":
                return None
            if p.startswith("{") and p.endswith("}"):
                values = {int(v) for v in p[1:-1].split(",")}
            elif "-" in p:
                lo, hi = (int(v) for v in p.split("-", 1))
                values = set(range(lo, hi + 1))
            else:
                values = {int(p)}
        except ValueError:
            raise AclConfigError(f"bad address pattern {self.text!r}") from None
        if not values or not all(0 <= v <= 255 for v in values):
            raise AclConfigError(f"bad address pattern {self.text!r}")
        return values

    def matches(self, address: str) -> bool:
        if self.text == "*":
            return True
        try:
            ip = ipaddress.ip_address(address)
        except ValueError:
            return False
        if self._net is not None:
            return ip.version == self._net.version and ip in self._net
        if ip.version != 4:
            return False
        octets = [int(o) for o in str(ip).split(".")]
        return all(allowed is None or o in allowed
                   for o, allowed in zip(octets, self._parts, strict=True))


@dataclasses.dataclass(frozen=True)
class Account:
    access_key: str
    secret_key: str
    admin: bool = False
    default_topic_perm: Perm = Perm.DENY
    default_group_perm: Perm = Perm.DENY
    topic_perms: dict[str, Perm] = dataclasses.field(default_factory=dict)
    group_perms: dict[str, Perm] = dataclasses.field(default_factory=dict)
    white_addresses: tuple[AddressPattern, ...] = ()


@dataclasses.dataclass(frozen=True)
class AclConfig:
    accounts: dict[str, Account]
    global_white_addresses: tuple[AddressPattern, ...] = ()

    def address_allowed(self, address: str) -> bool:
        return not self.global_white_addresses or any(
            p.matches(address) for p in self.global_white_addresses)


def _addresses(value: Any, where: str) -> tuple[AddressPattern, ...]:
    if value is None or value == "":
        return ()
    if isinstance(value, str):
        value = [v for v in value.split(",") if v.strip()]
    if not isinstance(value, list):
        raise AclConfigError(f"{where}: expected a list of addresses")
    out = []
    for v in value:
        if not isinstance(v, str | int):
            raise AclConfigError(f"{where}: expected an address, got {v!r}")
        try:
            out.append(AddressPattern(str(v)))
        except AclConfigError as e:
            raise AclConfigError(f"{where}: {e}") from None
    return tuple(out)


def _perm_table(value: Any, where: str) -> dict[str, Perm]:
    if value is None:
        return {}
    if isinstance(value, dict):  # JSON convenience: {"topicA": "PUB"}
        items = [f"{k}={v}" for k, v in value.items()]
    elif isinstance(value, list):
        items = value
    else:
        raise AclConfigError(f"{where}: expected a list of NAME=PERM")
    table: dict[str, Perm] = {}
    for item in items:
        if not isinstance(item, str) or "=" not in item:
            raise AclConfigError(f"{where}: expected NAME=PERM, got {item!r}")
        name, _, perm = item.partition("=")
        name = name.strip()
        if not name:
            raise AclConfigError(f"{where}: empty name in {item!r}")
        table[name] = parse_perm(perm, f"{where} {name}")
    return table


def _bool(value: Any, where: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise AclConfigError(f"{where}: expected true or false, got {value!r}")


_ACCOUNT_KEYS = {"accessKey", "secretKey", "admin", "defaultTopicPerm", "defaultGroupPerm",
                 "topicPerms", "groupPerms", "whiteRemoteAddress"}


def parse_acl(data: Any) -> AclConfig:
    """AclConfig from the decoded file; AclConfigError naming the bad entry."""
    if not isinstance(data, dict):
        raise AclConfigError("expected a mapping with `accounts`")
    unknown = set(data) - {"accounts", "globalWhiteRemoteAddresses", "dataVersion"}
    if unknown:
        raise AclConfigError(f"unknown keys {sorted(unknown)}")
    raw_accounts = data.get("accounts")
    raw_accounts = [] if raw_accounts is None else raw_accounts
    if not isinstance(raw_accounts, list):
        raise AclConfigError("accounts: expected a list")
    accounts: dict[str, Account] = {}
    for i, raw in enumerate(raw_accounts):
        where = f"accounts[{i}]"
        if not isinstance(raw, dict):
            raise AclConfigError(f"{where}: expected a mapping")
        extra = set(raw) - _ACCOUNT_KEYS
        if extra:
            raise AclConfigError(f"{where}: unknown keys {sorted(extra)}")
        ak, sk = str(raw.get("accessKey", "")), str(raw.get("secretKey", ""))
        if not ak or len(ak) > MAX_KEY_LENGTH or not _KEY_RE.match(ak) or ak.startswith("@"):
            raise AclConfigError(f"{where}: accessKey {ak!r} must be 1-{MAX_KEY_LENGTH} of "
                                 "A-Z a-z 0-9 _ - . @ : (not starting with @)")
        if not MIN_SECRET_LENGTH <= len(sk) <= MAX_KEY_LENGTH:
            raise AclConfigError(f"{where} ({ak}): secretKey must be {MIN_SECRET_LENGTH}-"
                                 f"{MAX_KEY_LENGTH} characters")
        if ak in accounts:
            raise AclConfigError(f"{where}: accessKey {ak!r} appears twice")
        where = f"{where} ({ak})"
        group_perms = _perm_table(raw.get("groupPerms"), f"{where} groupPerms")
        accounts[ak] = Account(
            access_key=ak, secret_key=sk,
            admin=_bool(raw.get("admin", False), f"{where} admin"),
            default_topic_perm=parse_perm(raw.get("defaultTopicPerm", "DENY"),
                                          f"{where} defaultTopicPerm"),
            default_group_perm=parse_perm(raw.get("defaultGroupPerm", "DENY"),
                                          f"{where} defaultGroupPerm"),
            topic_perms=_perm_table(raw.get("topicPerms"), f"{where} topicPerms"),
            group_perms=group_perms,
            white_addresses=_addresses(raw.get("whiteRemoteAddress"),
                                       f"{where} whiteRemoteAddress"))
    return AclConfig(accounts, _addresses(data.get("globalWhiteRemoteAddresses"),
                                          "globalWhiteRemoteAddresses"))


def parse_text(text: str, name: str = "") -> AclConfig:
    """JSON when the text is JSON (or the name ends .json); YAML otherwise."""
    stripped = text.lstrip()
    if name.endswith(".json") or stripped.startswith("{"):
        try:
            data = json.loads(text)
        except ValueError as e:
            raise AclConfigError(f"not valid JSON: {e}") from None
    else:
        data = parse_yaml_subset(text)
    return parse_acl(data)


def load_acl_file(path: str | Path) -> AclConfig:
    p = Path(path)
    try:
        with p.open("rb") as f:
            raw = f.read(MAX_ACL_FILE_BYTES + 1)
    except OSError as e:
        raise AclConfigError(f"cannot read {p}: {e.strerror}") from None
    if len(raw) > MAX_ACL_FILE_BYTES:
        raise AclConfigError(f"{p}: larger than {MAX_ACL_FILE_BYTES} bytes")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise AclConfigError(f"{p}: not UTF-8") from None
    try:
        return parse_text(text, p.name)
    except AclConfigError as e:
        raise AclConfigError(f"{p}: {e}") from None


# -- YAML ---------------------------------------------------------------------------------
def parse_yaml_subset(text: str) -> Any:
    """The YAML of plain_acl.yml: mappings, `- ` lists (of scalars or of mappings), flow
    lists `[a, b]`, scalars (quoted or plain) and `#` comments. Plain scalars stay text
    (but true/false/null): a secretKey like 0123456789 keeps its leading 0."""
    lines: list[tuple[int, str, int]] = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = _strip_comment(raw).rstrip()
        if line.strip() and line.strip() != "---":
            if "\t" in line[:len(line) - len(line.lstrip())]:
                raise AclConfigError(f"line {number}: tabs in indentation")
            lines.append((len(line) - len(line.lstrip()), line.strip(), number))
    if not lines:
        return {}
    value, pos = _block(lines, 0, lines[0][0])
    if pos != len(lines):
        raise AclConfigError(f"line {lines[pos][2]}: unexpected indentation")
    return value


def _strip_comment(line: str) -> str:
    quote = ""
    for i, ch in enumerate(line):
        if quote:
            if ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1] in " \t"):
            return line[:i]
    return line


def _scalar(text: str) -> Any:
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    if text.startswith("[") and text.endswith("]"):
        inner = text[1:-1].strip()
        return [_scalar(v) for v in inner.split(",")] if inner else []
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    if low in ("null", "~", ""):
        return None
    return text


def _block(lines: list[tuple[int, str, int]], pos: int, indent: int) -> tuple[Any, int]:
    if lines[pos][1].startswith("- ") or lines[pos][1] == "-":
        out_list: list[Any] = []
        while pos < len(lines) and lines[pos][0] == indent and (
                lines[pos][1].startswith("- ") or lines[pos][1] == "-"):
            rest = lines[pos][1][1:].strip()
            number = lines[pos][2]
            if rest and (":" not in rest or rest[0] in "'\"[") or (
                    rest and not re.match(r"^[^:]+:(\s|$)", rest)):
                out_list.append(_scalar(rest))
                pos += 1
                continue
            # a mapping item: its first key on the dash line, others indented below it
            item_indent = indent + 2
            sub = [(item_indent, rest, number)] if rest else []
            pos += 1
            while pos < len(lines) and lines[pos][0] > indent:
                sub.append(lines[pos])
                pos += 1
            if not sub:
                out_list.append(None)
                continue
            value, used = _block(sub, 0, sub[0][0])
            if used != len(sub):
                raise AclConfigError(f"line {sub[used][2]}: unexpected indentation")
            out_list.append(value)
        return out_list, pos
    out: dict[str, Any] = {}
    while pos < len(lines) and lines[pos][0] == indent:
        _, line, number = lines[pos]
        m = re.match(r"^([^:]+):(?:\s+(.*))?$", line) or re.match(r"^([^:]+):$", line)
        if m is None:
            raise AclConfigError(f"line {number}: expected `key: value`, got {line!r}")
        key = str(_scalar(m.group(1)))
        rest = (m.group(2) if m.lastindex and m.lastindex >= 2 else None) or ""
        pos += 1
        if rest.strip():
            out[key] = _scalar(rest)
        elif pos < len(lines) and (lines[pos][0] > indent or (
                lines[pos][0] == indent and lines[pos][1].startswith("-"))):
            out[key], pos = _block(lines, pos, lines[pos][0])
        else:
            out[key] = None
    return out, pos
