"""MessageSelector and what a subscription puts in heartbeats and pulls (no broker)."""

from __future__ import annotations

import pytest

from mqclient import MessageSelector, MQClientError, PushConsumer


def test_selectors() -> None:
    sql = MessageSelector.by_sql("a > 5")
    assert (sql.expression_type, sql.expression, sql.is_sql) == ("SQL92", "a > 5", True)
    assert MessageSelector.by_sql("  ").expression == "TRUE"  # everything, as a selector
    tag = MessageSelector.by_tag("")
    assert (tag.expression_type, tag.expression, tag.is_sql) == ("TAG", "*", False)


def test_subscriptions_reach_the_heartbeat() -> None:
    c = PushConsumer("G", "127.0.0.1:1")
    c.subscribe("TopicSql", MessageSelector.by_sql("a > 5 AND TAGS IN ('x')"))
    c.subscribe("TopicTags", "TagA || TagB")
    c.subscribe("TopicSel", MessageSelector.by_tag("TagC"))
    subs = {s.topic: (s.sub_string, s.expression_type)
            for s in c.instance.heartbeat_request().subscriptions}
    assert subs == {"TopicSql": ("a > 5 AND TAGS IN ('x')", "SQL92"),
                    "TopicTags": ("TagA || TagB", ""), "TopicSel": ("TagC", "")}
    c.subscribe("TopicSql", "*")  # subscribing again replaces the selector
    assert "TopicSql" not in c.instance.expression_types
    with pytest.raises(MQClientError) as e:
        c.subscribe("T", MessageSelector("XPATH", "a"))
    assert e.value.code == "ILLEGAL_ARGUMENT"
