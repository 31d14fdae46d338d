"""Output of the command-line tools: aligned tables for people, JSON for scripts."""

from __future__ import annotations

import base64
import dataclasses
import datetime
import json
from collections.abc import Iterable, Sequence
from typing import Any

from common.constants import PERM_READ, PERM_WRITE
from mqclient.admin_types import StoredMessage

TABLE_BODY_CHARS = 120  # longer bodies are cut in tables (--json has them whole)
COLUMN_GAP = "  "


def table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """Left-aligned columns under `#Header` names, as RocketMQ's tools print them."""
    cells = [[f"#{h}" for h in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    return "\n".join(COLUMN_GAP.join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
                     for r in cells)


def key_values(pairs: Iterable[tuple[str, object]], width: int = 32) -> str:
    """`key: value` lines with the keys padded (brokerStatus, queryMsgById)."""
    return "\n".join(f"{k:<{width}}: {v}" for k, v in pairs)


def human_time(ms: int) -> str:
    """Local time as RocketMQ prints it (yyyy-MM-dd HH:mm:ss,SSS); N/A for 0."""
    if ms <= 0:
        return "N/A"
    t = datetime.datetime.fromtimestamp(ms / 1000)
    return t.strftime("%Y-%m-%d %H:%M:%S,") + f"{ms % 1000:03d}"


def perm_name(perm: int) -> str:
    return ("R" if perm & PERM_READ else "-") + ("W" if perm & PERM_WRITE else "-")


def body_text(body: bytes, limit: int | None = None) -> str:
    """The body as text (undecodable bytes as U+FFFD), on one line, cut at `limit`."""
    text = body.decode("utf-8", errors="replace").replace("\n", "\\n").replace("\r", "\\r")
    if limit is not None and len(text) > limit:
        return text[: limit - 3] + "..."
    return text


def message_json(m: StoredMessage) -> dict[str, Any]:
    """A message for --json: every field, the body both as text and as base64."""
    out = {f.name: getattr(m, f.name) for f in dataclasses.fields(m) if f.name != "body"}
    out["body"] = m.body.decode("utf-8", errors="replace")
    out["body_base64"] = base64.b64encode(m.body).decode("ascii")
    return out


def jsonable(value: Any) -> Any:
    if isinstance(value, StoredMessage):
        return message_json(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    return value


def dumps(value: Any) -> str:
    return json.dumps(jsonable(value), indent=2, sort_keys=False)
