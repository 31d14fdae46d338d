"""What a consumer subscribes to on a topic (RocketMQ's MessageSelector).

    consumer.subscribe("TopicA", "TagA || TagB")                      # tags, the default
    consumer.subscribe("TopicA", MessageSelector.by_sql("a > 5 AND TAGS IN ('x', 'y')"))

A SQL92 selector is evaluated by the broker on the message properties (TAGS is one of
them); the broker needs `enablePropertyFilter=true`. A broker that cannot serve it, or an
expression that does not parse, makes the consumer's start() fail with the broker's reason
(SUBSCRIPTION_PARSE_FAILED says at which column).
"""

from __future__ import annotations

import dataclasses

from filter import EXPRESSION_TYPE_SQL92, EXPRESSION_TYPE_TAG, compile_sql

__all__ = ["EXPRESSION_TYPE_SQL92", "EXPRESSION_TYPE_TAG", "MessageSelector"]


@dataclasses.dataclass(frozen=True)
class MessageSelector:
    expression_type: str
    expression: str

    @classmethod
    def by_sql(cls, sql: str) -> MessageSelector:
        """A SQL92 selector on message properties: numbers (>, >=, <, <=, BETWEEN, =,
        <>), strings (=, <>, IN), IS [NOT] NULL, AND / OR / NOT, TRUE / FALSE / NULL.
        An empty one selects every message. An expression that does not parse raises
        filter.FilterError (a ValueError saying at which column) here, before any broker
        is asked (which may be later: a topic without a route yet)."""
        expression = sql if sql and sql.strip() else "TRUE"
        compile_sql(expression)
        return cls(EXPRESSION_TYPE_SQL92, expression)

    @classmethod
    def by_tag(cls, tags: str) -> MessageSelector:
        """`*` (or empty) for every message, else `TagA || TagB`."""
        return cls(EXPRESSION_TYPE_TAG, tags or "*")

    @property
    def is_sql(self) -> bool:
        return self.expression_type == EXPRESSION_TYPE_SQL92
