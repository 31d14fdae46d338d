"""Builders of hand-written history entries for the checker tests (history.py's format)."""

from __future__ import annotations

from typing import Any

from chaos.history import message_id

Entry = dict[str, Any]


def invoke(t: float, process: str, key: str, seq: int, *, ordered: bool = False) -> Entry:
    return {"time": t, "process": process, "type": "invoke", "f": "send",
            "value": {"id": message_id(key, seq), "key": key, "seq": seq,
                      "ordered": ordered}}


def ok(t: float, process: str, key: str, seq: int, *, broker: str = "broker-a",
       status: str = "SEND_OK", offset: int | None = None, queue: int = 0) -> Entry:
    value: dict[str, Any] = {"id": message_id(key, seq), "status": status, "broker": broker,
                             "queue": queue}
    if offset is not None:
        value["commit_log_offset"] = offset
    return {"time": t, "process": process, "type": "ok", "f": "send", "value": value}


def failed(t: float, process: str, key: str, seq: int, *, error: str = "TIMEOUT",
           type_: str = "info") -> Entry:
    return {"time": t, "process": process, "type": type_, "f": "send",
            "value": {"id": message_id(key, seq)}, "error": error}


def sent(t0: float, t1: float, process: str, key: str, seq: int, **kw: Any) -> list[Entry]:
    """An acknowledged send: invoked at t0, SEND_OK at t1."""
    ordered = kw.pop("ordered", False)
    return [invoke(t0, process, key, seq, ordered=ordered), ok(t1, process, key, seq, **kw)]


def consume(t: float, key: str, seq: int, *, process: str = "consumer-0",
            broker: str = "broker-a", queue: int = 0, topic: str = "T",
            queue_offset: int | None = None) -> Entry:
    value: dict[str, Any] = {"id": message_id(key, seq), "key": key, "seq": seq,
                             "broker": broker, "queue": queue, "topic": topic}
    if queue_offset is not None:
        value["queue_offset"] = queue_offset
    return {"time": t, "process": process, "type": "ok", "f": "consume", "value": value}


def fault(t: float, phase: str, *, window: int = 1, name: str = "kill",
          node: str = "broker-a-0") -> Entry:
    return {"time": t, "process": "nemesis", "type": "info", "f": "fault",
            "value": {"phase": phase, "fault": name, "node": node, "window": window}}


def probe(t: float, *, group: str = "broker-a", ack: int, top: int, window: int = 1) -> Entry:
    return {"time": t, "process": "nemesis", "type": "info", "f": "probe",
            "value": {"kind": "fall-behind", "group": group, "slave_ack_offset": ack,
                      "master_max_offset": top, "fall_behind_bytes": top - ack,
                      "fall_behind_seconds": 0.1, "before_window": window}}


def offsets(t: float, committed: dict[str, int], *, broker: str = "broker-a",
            addr: str = "127.0.0.1:10911", group: str = "G") -> Entry:
    """A consumer-offsets probe: `committed` is {"TOPIC/QUEUE": offset} of `group`."""
    return {"time": t, "process": "runner", "type": "info", "f": "probe",
            "value": {"kind": "consumer-offsets", "broker": broker, "addr": addr,
                      "groups": {group: committed}}}


def awaited(t: float, condition: str, *, node: str = "broker-a-0", met: bool = True,
            since_start: float | None = None, since_end: float | None = None) -> Entry:
    return {"time": t, "process": "nemesis", "type": "info", "f": "probe",
            "value": {"kind": "await", "condition": condition, "node": node, "met": met,
                      "waited_s": 1.0, "timeout_s": 10.0, "since_fault_start_s": since_start,
                      "since_fault_end_s": since_end}}
