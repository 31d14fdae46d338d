"""What a chaos run leaves in a cluster, as a later lag report (the collector) and the name
servers see it."""

from __future__ import annotations

from typing import Any

from chaos.history import RUN
from mqclient.admin import MQAdmin
from spark_analytics.collect import Collector


def groups_in_lag_report(namesrv_addr: str) -> set[str]:
    """The consumer groups a collector snapshot (the lag job's input) has rows of."""
    with Collector(namesrv_addr) as collector:
        return {g for g in collector.snapshot().table().column("group").to_pylist() if g}


def chaos_names(namesrv_addr: str) -> tuple[set[str], set[str]]:
    """(chaos topics the name servers route, chaos groups in a lag report)."""
    with MQAdmin(namesrv_addr) as admin:
        topics = {t for t in admin.topic_list() if "haos" in t}
    return topics, {g for g in groups_in_lag_report(namesrv_addr) if g.startswith("chaos-")}


def cleanup_note(history: list[dict[str, Any]]) -> dict[str, Any] | None:
    return next((e["value"] for e in history if e["f"] == RUN
                 and e["value"].get("phase") == "cleanup"), None)
