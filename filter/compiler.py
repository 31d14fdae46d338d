"""SQL92 selectors compiled to Python functions, once per expression.

Evaluation follows RocketMQ's filter module: three-valued logic (a comparison with a missing
property is UNKNOWN; AND / OR / NOT as SQL; a message matches only when the whole
expression is TRUE). Message properties are strings: against a number a property is read as
a number, against TRUE / FALSE as Java's Boolean.valueOf reads it (`true` in any case, else
false), against a string or another property as a string. Where RocketMQ throws (a property
that is not a number compared with one, which fails the whole message) the comparison is
UNKNOWN here instead, so `a > 5 OR b = 'x'` still matches a message with a = 'abc', b = 'x'.
`CONTAINS` / `STARTSWITH` / `ENDSWITH` (and their NOT forms) are FALSE, never UNKNOWN, for
a missing property, as in RocketMQ.

The generated code answers two questions of every condition: "is it TRUE?" and "is it
FALSE?" (NOT x is TRUE when x is FALSE); with these, AND / OR / NOT need no third value at
run time and short-circuit as Python's `and` / `or` do. Each property is read once, and
only the properties the expression names are read.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TypeAlias

from filter.parser import (
    ORDERINGS,
    And,
    AsBoolean,
    Compare,
    Condition,
    Const,
    FilterError,
    In,
    IsNull,
    Neg,
    Not,
    Or,
    Prop,
    StringMatch,
    Value,
    parse,
    properties_of,
)

PROPERTY_SEPARATOR = b"\x01"  # name \x01 value \x02, RocketMQ's encoded properties
PROPERTIES_SEPARATOR = b"\x02"
# (record, names) -> the values of names in the record, or None
Extractor: TypeAlias = Callable[[bytes, tuple[bytes, ...]], tuple[bytes | None, ...] | None]


def to_number(value: str | None) -> int | float | None:
    """A property's text as a number (Java's Long.valueOf, else Double.valueOf); None when
    it is missing or not a number."""
    if value is None:
        return None
    try:
        number: int | float = int(value)
    except ValueError:
        try:
            number = float(value)
        except ValueError:
            return None
    return None if "_" in value else number  # Python reads 1_000, Java does not


class SqlFilter:
    """A compiled selector. `matches(properties)` takes a name -> value mapping;
    `matches_encoded(data)` takes a message's properties as the commitlog stores them
    (`name\\x01value\\x02...`) and reads only the names the expression uses;
    `matches_values(*values)` takes the values of `properties` (UTF-8 bytes, or None when
    missing) as someone else read them."""

    __slots__ = ("expression", "tree", "properties", "source", "matches", "matches_encoded",
                 "matches_values")

    def __init__(self, expression: str) -> None:
        self.expression = expression
        self.tree: Condition = parse(expression)
        self.properties: list[str] = properties_of(self.tree)
        text_source = _Codegen(self.properties, encoded=False).function(self.tree)
        bytes_source = _Codegen(self.properties, encoded=True).function(self.tree)
        self.source = text_source
        self.matches: Callable[[Mapping[str, str]], bool] = _build(text_source, "<sql92>")
        self.matches_encoded: Callable[[bytes], bool] = _build(bytes_source, "<sql92 raw>")
        values_source = _Codegen(self.properties, encoded=True).function(self.tree,
                                                                         by="values")
        # The values (UTF-8 bytes or None) of `properties`, in that order.
        self.matches_values: Callable[..., bool] = _build(values_source, "<sql92 values>")

    def record_matcher(self, extract: Extractor, fallback: Extractor) -> Callable[[bytes], bool]:
        """`matches(record)` of whole stored records, one call a message: `extract(record,
        names)` gives the values of `properties` (UTF-8 names and values, None when
        missing), or None to have `fallback` read them. Who stores records knows their
        layout; this module does not."""
        source = _Codegen(self.properties, encoded=True).function(self.tree, by="record")
        names = tuple(name.encode() for name in self.properties)
        return _build(source, "<sql92 record>", _extract=extract, _fallback=fallback,
                      _names=names)

    def tags_only(self) -> frozenset[str] | None:
        """The TAGS a matching message must have when the expression requires one of a set
        (`TAGS IN (...)` or `TAGS = '...'` as a top-level AND term), else None: lets the
        store skip messages by their consume-queue tags code before reading them."""
        return _required_tags(self.tree)

    def __repr__(self) -> str:
        return f"SqlFilter({self.expression!r})"


def compile_sql(expression: str) -> SqlFilter:
    """Parses and compiles; raises FilterError (with the column) when it is wrong, or
    when it nests deeper than Python's parser and compiler go (thousands of levels)."""
    try:
        return SqlFilter(expression)
    except (RecursionError, MemoryError, SyntaxError):
        raise FilterError(expression, 0, "the expression nests too deeply (use fewer "
                          "parentheses, NOTs or ORs in one chain)") from None


def _required_tags(node: Condition) -> frozenset[str] | None:
    if isinstance(node, And):
        left, right = _required_tags(node.left), _required_tags(node.right)
        if left is None:
            return right
        return left if right is None else left & right
    if isinstance(node, In) and not node.negated and node.prop.name == "TAGS":
        return node.values
    if (isinstance(node, Compare) and node.op == "=" and isinstance(node.left, Prop)
            and node.left.name == "TAGS" and isinstance(node.right, Const)
            and isinstance(node.right.value, str)):
        return frozenset({node.right.value})
    return None


def _float(value: str | bytes) -> float | None:
    try:
        return float(value)
    except ValueError:
        return None


def _build(source: str, filename: str, **names: object) -> Callable[..., bool]:
    namespace: dict[str, object] = {"_float": _float, **names}
    exec(compile(source, filename, "exec"), namespace)  # noqa: S102 - our own generated code
    return namespace["_match"]  # type: ignore[return-value]


class _Codegen:
    """Python source of `_match(props)` (text) or `_match(data)` (encoded) for one tree."""

    def __init__(self, properties: list[str], *, encoded: bool) -> None:
        self.encoded = encoded
        self.index = {name: i for i, name in enumerate(properties)}
        self.views: dict[str, list[str]] = {}  # local name -> the statements setting it

    def function(self, tree: Condition, *, by: str = "") -> str:
        """`_match(props)`; encoded: `_match(data)`, with by="values" `_match(v0, ...)`
        taking the values of `properties` in order, with by="record" `_match(record)`
        reading them with `_extract(record, _names)` (or `_fallback` when it says None)."""
        body = self.true(tree)
        args = ", ".join(f"v{i}" for i in self.index.values())
        if by == "values":
            lines = [f"def _match({args}):"]
        elif by == "record":
            lines = ["def _match(record):"]
            if self.index:
                lines += ["    t = _extract(record, _names)",
                          "    if t is None:",
                          "        t = _fallback(record, _names)",
                          f"    {args}, = t"]
        else:
            lines = ["def _match(data):" if self.encoded else "def _match(props):"]
            if self.encoded and self.index:
                lines.append("    data = b'\\x02' + data")
            for name, i in self.index.items():
                lines.extend(self.read_property(name, i))
        for statements in self.views.values():
            lines += statements
        lines.append(f"    return {body}")
        return "\n".join(lines) + "\n"

    def read_property(self, name: str, i: int) -> list[str]:
        if not self.encoded:
            return [f"    v{i} = props.get({name!r})"]
        key = PROPERTIES_SEPARATOR + name.encode() + PROPERTY_SEPARATOR
        return [
            f"    s = data.find({key!r})",
            f"    if s < 0: v{i} = None",
            "    else:",
            f"        s += {len(key)}",
            "        e = data.find(b'\\x02', s)",
            f"        v{i} = data[s:] if e < 0 else data[s:e]",
        ]

    # -- constants and values --------------------------------------------------------------
    def literal(self, value: object) -> str:
        if isinstance(value, str) and self.encoded:
            return repr(value.encode())
        if isinstance(value, float) and value != value:
            return "float('nan')"
        if isinstance(value, float) and value in (float("inf"), float("-inf")):
            return f"float({str(value)!r})"
        return repr(value)

    def view(self, prop: Prop, kind: str) -> str:
        """A local holding the property as text (v), a number (n), its negation (m) or
        a boolean (b); None when the property is missing (or not a number)."""
        i = self.index[prop.name]
        local, v = f"{kind}{i}", f"v{i}"
        if local in self.views:
            return local
        if kind == "n":  # as to_number, inline: this runs once per message
            underscore = "b'_'" if self.encoded else "'_'"
            self.views[local] = [f"    if {v} is None: {local} = None",
                                 "    else:",
                                 f"        try: {local} = int({v})",
                                 f"        except ValueError: {local} = _float({v})",
                                 f"        if {underscore} in {v}: {local} = None"]
        elif kind == "m":
            self.view(prop, "n")
            self.views[local] = [f"    {local} = None if n{i} is None else -n{i}"]
        elif kind == "b":
            true = "b'true'" if self.encoded else "'true'"
            self.views[local] = [f"    {local} = None if {v} is None else {v}.lower() == {true}"]
        return local

    def operand(self, value: Value, domain: str) -> tuple[str, bool]:
        """(expression, may be None at run time) of a value in a domain: "text",
        "number" or "bool"."""
        if isinstance(value, Prop):
            kind = {"text": "v", "number": "n", "bool": "b"}[domain]
            return (f"v{self.index[value.name]}" if kind == "v" else self.view(value, kind),
                    True)
        if isinstance(value, Neg):
            return self.view(value.prop, "m"), True
        v = value.value
        if domain == "number" and isinstance(v, str):
            number = to_number(v)  # RocketMQ converts a string constant too
            return ("None", True) if number is None else (self.literal(number), False)
        if domain == "bool" and isinstance(v, str):
            return self.literal(v.lower() == "true"), False
        return self.literal(v), False

    @staticmethod
    def domain(left: Value, right: Value) -> str | None:
        """Where an = / <> compares; None when the two can never be equal (a boolean
        against a number)."""
        kinds = {_kind(left), _kind(right)}
        if "bool" in kinds:
            return None if kinds & {"number", "neg"} else "bool"
        if kinds & {"number", "neg"}:
            return "number"
        return "text"

    # -- conditions ------------------------------------------------------------------------
    def true(self, node: Condition) -> str:
        """Python expression that is True exactly when `node` is TRUE."""
        return self.test(node, want=True)

    def false(self, node: Condition) -> str:
        """Python expression that is True exactly when `node` is FALSE."""
        return self.test(node, want=False)

    def test(self, node: Condition, want: bool) -> str:
        if isinstance(node, And):
            a, b = self.test(node.left, want), self.test(node.right, want)
            return f"({a} and {b})" if want else f"({a} or {b})"
        if isinstance(node, Or):
            a, b = self.test(node.left, want), self.test(node.right, want)
            return f"({a} or {b})" if want else f"({a} and {b})"
        if isinstance(node, Not):
            return self.test(node.operand, not want)
        if isinstance(node, Compare):
            return self.compare(node, want)
        if isinstance(node, In):
            v = f"v{self.index[node.prop.name]}"
            # A set display of constants after `in` is compiled to one frozenset constant.
            members = "{" + ", ".join(self.literal(s) for s in sorted(node.values)) + ",}"
            inside = want != node.negated
            return f"({v} in {members})" if inside else \
                f"({v} is not None and {v} not in {members})"
        if isinstance(node, IsNull):
            if isinstance(node.value, Const):
                is_null = node.value.value is None
                return repr((is_null != node.negated) == want)
            expr, _ = self.operand(node.value, "number" if isinstance(node.value, Neg)
                                   else "text")
            null = want != node.negated
            return f"({expr} is None)" if null else f"({expr} is not None)"
        if isinstance(node, StringMatch):
            v = f"v{self.index[node.prop.name]}"
            if not node.text:
                test = "False"  # RocketMQ: an empty search string never matches
            else:
                text = self.literal(node.text)
                found = {"CONTAINS": f"{text} in {v}",
                         "STARTSWITH": f"{v}.startswith({text})",
                         "ENDSWITH": f"{v}.endswith({text})"}[node.kind]
                test = f"({v} is not None and {'not ' if node.negated else ''}{found})"
            return test if want else f"(not {test})"
        if isinstance(node, AsBoolean):
            value = node.value
            if isinstance(value, Const):
                return repr(value.value is want)  # NULL is neither
            # A property is text, never a Boolean: RocketMQ's cast gives FALSE (missing: NULL).
            v = f"v{self.index[value.name]}" if isinstance(value, Prop) else "None"
            return "False" if want else f"({v} is not None)"
        raise TypeError(f"not a condition: {node!r}")

    def compare(self, node: Compare, want: bool) -> str:
        op = node.op
        domain = "number" if op in ORDERINGS else self.domain(node.left, node.right)
        if domain is None:  # a boolean against a number: never equal, unless NULL
            checks = [self.operand(side, "number")[0] for side in (node.left, node.right)
                      if not isinstance(side, Const)]
            holds_when_present = (op == "=") != want
            if not holds_when_present:
                return "False"
            return "(" + " and ".join(f"{c} is not None" for c in checks) + ")" \
                if checks else "True"
        left, left_null = self.operand(node.left, domain)
        right, right_null = self.operand(node.right, domain)
        if "None" in (left, right):
            return "False"  # a string constant that is no number: UNKNOWN
        py_op = {"=": "==", "<>": "!="}.get(op, op)
        relation = f"{left} {py_op} {right}"
        if not want:
            relation = f"not ({relation})"
        checks = [f"{e} is not None" for e, null in ((left, left_null), (right, right_null))
                  if null]
        # `v == 'x'` is already False for a missing v: the check is needed only when the
        # relation could hold with None.
        if want and op == "=" and domain == "text" and len(checks) == 1:
            return f"({relation})"
        return "(" + " and ".join([*checks, relation]) + ")"


def _kind(value: Value) -> str:
    if isinstance(value, Prop):
        return "prop"
    if isinstance(value, Neg):
        return "neg"
    v = value.value
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, int | float):
        return "number"
    return "text"  # a string (NULL is refused by the parser)

