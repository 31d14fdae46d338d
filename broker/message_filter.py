"""Subscriptions as the store's message filters: tags, or SQL92 on message properties.

A SQL92 subscription (expression type SQL92) is served only with `enablePropertyFilter=true`
in broker.conf, as in RocketMQ 4.x; its expression is compiled once (at the consumer's
heartbeat, or at its first pull after a restart) and kept in a bounded cache shared by every
group subscribing with the same text. A pull then evaluates it against each message's
properties, read from the record without decoding the rest (the store's C fast path when it
is built); a top-level `TAGS IN (...)` / `TAGS = '...'` term also skips messages by their
consume-queue tags code first.
"""

from __future__ import annotations

import collections
import logging
from collections.abc import Callable

from broker.status import RequestError
from common import codec, native
from filter import (
    EXPRESSION_TYPE_SQL92,
    EXPRESSION_TYPE_TAG,
    FilterError,
    SqlFilter,
    compile_sql,
)
from mqproto import common_pb2
from store.reading import TagFilter

log = logging.getLogger(__name__)

FILTER_CACHE_SIZE = 1024  # compiled expressions kept (RocketMQ's parser caches 100)


class SqlMessageFilter:
    """The store's MessageFilter (codes / matches_record) of one SQL92 expression."""

    __slots__ = ("sql", "codes", "matches_record")
    filters = True

    def __init__(self, sql: SqlFilter) -> None:
        self.sql = sql
        tags = sql.tags_only()
        self.codes = None if tags is None else frozenset(codec.tags_code(t) for t in tags)
        lib = native.lib
        fallback = codec.record_property_values
        self.matches_record: Callable[[bytes], bool] = sql.record_matcher(
            lib.property_values if lib is not None else fallback, fallback)


MessageFilter = TagFilter | SqlMessageFilter


def not_supported(expression_type: str) -> RequestError:
    return RequestError(common_pb2.REQUEST_CODE_NOT_SUPPORTED,
                        f"The broker does not support consumer to filter message by "
                        f"{expression_type} (set enablePropertyFilter=true in broker.conf)")


class FilterRegistry:
    """Compiled SQL92 subscriptions by expression text (errors too, so a bad expression
    repeated by every heartbeat is parsed once). Event loop only."""

    def __init__(self, enabled: bool, size: int = FILTER_CACHE_SIZE) -> None:
        self.enabled = enabled
        self.size = size
        self._compiled: collections.OrderedDict[str, SqlMessageFilter | FilterError] = (
            collections.OrderedDict())

    def __len__(self) -> int:
        return len(self._compiled)

    def check(self, expression_type: str, expression: str) -> None:
        """A subscription's expression, refused with a RequestError that says why (the
        column for a syntax error)."""
        self.message_filter(expression_type, expression)

    def message_filter(self, expression_type: str, expression: str) -> MessageFilter:
        kind = (expression_type or EXPRESSION_TYPE_TAG).upper()
        if kind == EXPRESSION_TYPE_TAG:
            return TagFilter(expression)
        if kind != EXPRESSION_TYPE_SQL92:
            raise RequestError(common_pb2.SUBSCRIPTION_PARSE_FAILED,
                               f"unknown expression type {expression_type!r}: "
                               f"{EXPRESSION_TYPE_TAG} or {EXPRESSION_TYPE_SQL92}")
        if not self.enabled:
            raise not_supported(kind)
        compiled = self._compiled.get(expression)
        if compiled is None:
            try:
                compiled = SqlMessageFilter(compile_sql(expression))
            except FilterError as e:
                log.warning("SQL92 subscription refused: %s", e)
                compiled = e
            self._compiled[expression] = compiled
            if len(self._compiled) > self.size:
                self._compiled.popitem(last=False)
        else:
            self._compiled.move_to_end(expression)
        if isinstance(compiled, FilterError):
            raise RequestError(common_pb2.SUBSCRIPTION_PARSE_FAILED, str(compiled))
        return compiled
