"""SQL92 message selectors (RocketMQ's filter module): a pure parser and evaluator, no I/O.

    f = compile_sql("a > 5 AND TAGS IN ('x', 'y')")
    f.matches({"a": "7", "TAGS": "x"})                     # True
    f.matches_encoded(b"a\\x017\\x02TAGS\\x01x\\x02")        # True: the commitlog's encoding

- ``parser``: tokens, syntax tree, parser with positioned errors (FilterError)
- ``compiler``: the tree as a Python function, compiled once per expression
"""

from filter.compiler import SqlFilter, compile_sql, to_number
from filter.parser import FilterError, parse

# Expression types of a subscription, as RocketMQ's ExpressionType names them.
EXPRESSION_TYPE_TAG = "TAG"
EXPRESSION_TYPE_SQL92 = "SQL92"

__all__ = ["EXPRESSION_TYPE_SQL92", "EXPRESSION_TYPE_TAG", "FilterError", "SqlFilter",
           "compile_sql", "parse", "to_number"]
