"""SQL92 message selectors: tokens, syntax tree and parser (RocketMQ's SelectorParser.jj).

Grammar, loosest first (keywords in any case):

    expression := and ( OR and )*
    and        := not ( AND not )*
    not        := NOT not | predicate
    predicate  := operand [ ( = | <> | > | >= | < | <= ) operand
                          | [NOT] BETWEEN operand AND operand
                          | [NOT] IN ( 'string' [, 'string']* )
                          | IS [NOT] NULL
                          | [NOT] ( CONTAINS | STARTSWITH | ENDSWITH ) 'string' ]
    operand    := ( + | - ) operand | constant | property | ( expression )
    constant   := 123 | 123L | 1.5 | 1.5E3 | .5 | 'it''s' | TRUE | FALSE | NULL
    property   := [A-Za-z_$][A-Za-z0-9_$]*          (TAGS is the message's tag)

`--` and `/* */` comments are skipped. RocketMQ's own checks are made here, each reported
with the column it concerns: only numbers are ordered (`a > 'x'` is refused), NULL is not
compared with `=` (IS NULL is), BETWEEN's constant bounds are in order, IN and the string
matches apply to a property. One deliberate difference: NOT binds as in SQL92, looser than
a comparison (`NOT a > 5` is `NOT (a > 5)`), where RocketMQ's grammar refuses that text.
"""

from __future__ import annotations

import dataclasses
import re
from typing import TypeAlias

LONG_MAX = 2**63 - 1

KEYWORDS = frozenset({"NOT", "AND", "OR", "BETWEEN", "IN", "TRUE", "FALSE", "NULL", "IS",
                      "CONTAINS", "STARTSWITH", "ENDSWITH"})
STRING_MATCHES = ("CONTAINS", "STARTSWITH", "ENDSWITH")
COMPARISONS = ("=", "<>", ">", ">=", "<", "<=")
ORDERINGS = frozenset({">", ">=", "<", "<="})


class FilterError(ValueError):
    """An expression that cannot be used; says where (column, 1-based) and why."""

    def __init__(self, expression: str, position: int, reason: str) -> None:
        self.expression = expression
        self.position = position
        self.column = position + 1
        self.reason = reason
        shown = expression.replace("\n", " ").replace("\r", " ").replace("\t", " ")
        super().__init__(f"invalid SQL92 expression at column {self.column}: {reason}\n"
                         f"  {shown}\n  {' ' * position}^")


# -- tokens ------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True, slots=True)
class Token:
    kind: str  # NUMBER, STRING, ID, KEYWORD, OP, END
    text: str  # as written (a keyword: upper case)
    pos: int
    value: int | float | str | None = None  # NUMBER and STRING


_TOKEN_RE = re.compile(r"""
    (?P<space>[ \t\n\r\f]+|--[^\n\r]*|/\*.*?\*/)
  | (?P<float>(?:\d+\.\d*(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?|\d+[eE][+-]?\d+))
  | (?P<decimal>\d+[lL]?)
  | (?P<string>'(?:[^']|'')*')
  | (?P<id>[A-Za-z_$][A-Za-z0-9_$]*)
  | (?P<op><>|>=|<=|[=<>(),+-])
""", re.VERBOSE | re.DOTALL)

_HINTS = {"!": "use <> for 'not equal'", "\"": "strings are written in single quotes",
          "'": "this string has no closing quote", "/": "a comment is written /* ... */"}


def tokenize(text: str) -> list[Token]:
    tokens: list[Token] = []
    pos = 0
    while pos < len(text):
        m = _TOKEN_RE.match(text, pos)
        if m is None:
            ch = text[pos]
            hint = _HINTS.get(ch, "")
            raise FilterError(text, pos, f"unexpected character {ch!r}"
                                         + (f" ({hint})" if hint else ""))
        kind, raw = m.lastgroup, m.group()
        if kind == "float":
            tokens.append(Token("NUMBER", raw, pos, float(raw)))
        elif kind == "decimal":
            value = int(raw.rstrip("lL"))
            if value > LONG_MAX:
                raise FilterError(text, pos, f"{raw} is out of range (a long at most "
                                             f"{LONG_MAX})")
            tokens.append(Token("NUMBER", raw, pos, value))
        elif kind == "string":
            tokens.append(Token("STRING", raw, pos, raw[1:-1].replace("''", "'")))
        elif kind == "id":
            upper = raw.upper()
            if upper in KEYWORDS:
                tokens.append(Token("KEYWORD", upper, pos))
            else:
                tokens.append(Token("ID", raw, pos))
        elif kind == "op":
            tokens.append(Token("OP", raw, pos))
        pos = m.end()
    tokens.append(Token("END", "", len(text)))
    return tokens


# -- syntax tree -------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True, slots=True)
class Const:
    value: int | float | str | bool | None
    pos: int


@dataclasses.dataclass(frozen=True, slots=True)
class Prop:
    name: str
    pos: int


@dataclasses.dataclass(frozen=True, slots=True)
class Neg:
    """The negated number of a property (constants are negated when parsed)."""

    prop: Prop
    pos: int


Value: TypeAlias = Const | Prop | Neg


@dataclasses.dataclass(frozen=True, slots=True)
class Compare:
    op: str  # one of COMPARISONS
    left: Value
    right: Value


@dataclasses.dataclass(frozen=True, slots=True)
class In:
    prop: Prop
    values: frozenset[str]
    negated: bool


@dataclasses.dataclass(frozen=True, slots=True)
class IsNull:
    value: Value
    negated: bool


@dataclasses.dataclass(frozen=True, slots=True)
class StringMatch:
    kind: str  # one of STRING_MATCHES
    prop: Prop
    text: str
    negated: bool


@dataclasses.dataclass(frozen=True, slots=True)
class AsBoolean:
    """A property or constant standing as a condition (RocketMQ's boolean cast)."""

    value: Value


@dataclasses.dataclass(frozen=True, slots=True)
class And:
    left: Condition
    right: Condition


@dataclasses.dataclass(frozen=True, slots=True)
class Or:
    left: Condition
    right: Condition


@dataclasses.dataclass(frozen=True, slots=True)
class Not:
    operand: Condition


Condition: TypeAlias = Compare | In | IsNull | StringMatch | AsBoolean | And | Or | Not


def properties_of(node: Condition | Value) -> list[str]:
    """The property names an expression reads, in order of first use."""
    seen: dict[str, None] = {}

    def walk(n: object) -> None:
        if isinstance(n, Prop):
            seen.setdefault(n.name, None)
        elif dataclasses.is_dataclass(n):
            for f in dataclasses.fields(n):
                walk(getattr(n, f.name))

    walk(node)
    return list(seen)


# -- parser ------------------------------------------------------------------------------------
def _describe(token: Token) -> str:
    if token.kind == "END":
        return "the end"
    return repr(token.text) if token.kind != "STRING" else token.text


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = tokenize(text)
        self.i = 0

    # token helpers
    @property
    def tok(self) -> Token:
        return self.tokens[self.i]

    def peek(self, ahead: int = 1) -> Token:
        return self.tokens[min(self.i + ahead, len(self.tokens) - 1)]

    def is_(self, kind: str, text: str | None = None, token: Token | None = None) -> bool:
        t = token or self.tok
        return t.kind == kind and (text is None or t.text == text)

    def take(self) -> Token:
        t = self.tok
        self.i += 1
        return t

    def fail(self, reason: str, pos: int | None = None) -> FilterError:
        return FilterError(self.text, self.tok.pos if pos is None else pos, reason)

    def expect(self, kind: str, text: str | None, what: str) -> Token:
        if not self.is_(kind, text):
            raise self.fail(f"expected {what}, found {_describe(self.tok)}")
        return self.take()

    # grammar
    def parse(self) -> Condition:
        if self.is_("END"):
            raise self.fail("the expression is empty")
        cond = self.condition(self.or_expr())
        if not self.is_("END"):
            raise self.fail(f"expected AND, OR or the end, found {_describe(self.tok)}")
        return cond

    def or_expr(self) -> Condition | Value:
        left = self.and_expr()
        while self.is_("KEYWORD", "OR"):
            self.take()
            left = Or(self.condition(left), self.condition(self.and_expr()))
        return left

    def and_expr(self) -> Condition | Value:
        left = self.not_expr()
        while self.is_("KEYWORD", "AND"):
            self.take()
            left = And(self.condition(left), self.condition(self.not_expr()))
        return left

    def not_expr(self) -> Condition | Value:
        if self.is_("KEYWORD", "NOT"):
            self.take()
            return Not(self.condition(self.not_expr()))
        return self.predicate()

    def predicate(self) -> Condition | Value:
        start = self.tok
        left = self.operand()
        t = self.tok
        negated = False
        if self.is_("KEYWORD", "NOT") and self.peek().text in ("BETWEEN", "IN", *STRING_MATCHES):
            self.take()
            negated = True
            t = self.tok
        if t.kind == "OP" and t.text in COMPARISONS:
            self.take()
            value = self.value(left, start, t.text)
            right_start = self.tok
            right = self.value(self.operand(), right_start, t.text)
            return self.comparison(t.text, value, right)
        if self.is_("KEYWORD", "BETWEEN"):
            self.take()
            value = self.value(left, start, "BETWEEN")
            low_start = self.tok
            low = self.value(self.operand(), low_start, "BETWEEN")
            self.expect("KEYWORD", "AND", "AND between the bounds of BETWEEN")
            high_start = self.tok
            high = self.value(self.operand(), high_start, "BETWEEN")
            above, below = self.comparison(">=", value, low), self.comparison("<=", value, high)
            if (isinstance(low, Const) and isinstance(high, Const)  # numbers, checked above
                    and low.value > high.value):  # type: ignore[operator]
                raise self.fail(f"BETWEEN {low_start.text} AND {high_start.text}: the low "
                                "bound must not be above the high one", low_start.pos)
            if negated:  # RocketMQ: NOT BETWEEN is value < low OR value > high
                return Or(self.comparison("<", value, low), self.comparison(">", value, high))
            return And(above, below)
        if self.is_("KEYWORD", "IN"):
            self.take()
            prop = self.property_of(left, start, "IN")
            self.expect("OP", "(", "'(' after IN")
            values = [self.expect("STRING", None, "a 'string' in the IN list").value]
            while self.is_("OP", ","):
                self.take()
                values.append(self.expect("STRING", None, "a 'string' in the IN list").value)
            self.expect("OP", ")", "',' or ')' in the IN list")
            return In(prop, frozenset(str(v) for v in values), negated)
        if t.kind == "KEYWORD" and t.text in STRING_MATCHES:
            self.take()
            prop = self.property_of(left, start, t.text)
            text = self.expect("STRING", None, f"a 'string' after {t.text}").value
            return StringMatch(t.text, prop, str(text), negated)
        if self.is_("KEYWORD", "IS"):
            self.take()
            is_not = False
            if self.is_("KEYWORD", "NOT"):
                self.take()
                is_not = True
            self.expect("KEYWORD", "NULL", "NULL after IS" + (" NOT" if is_not else ""))
            return IsNull(self.value(left, start, "IS NULL"), is_not)
        return left

    def operand(self) -> Condition | Value:
        t = self.tok
        if self.is_("OP", "+") or self.is_("OP", "-"):
            self.take()
            inner_start = self.tok
            inner = self.value(self.operand(), inner_start, f"unary {t.text}")
            if t.text == "+":
                if isinstance(inner, Const) and not _is_number(inner.value):
                    raise self.fail(f"unary + applies to numbers, not {inner_start.text}",
                                    inner_start.pos)
                return inner
            if isinstance(inner, Const):
                if not _is_number(inner.value):
                    raise self.fail(f"unary - applies to numbers, not {inner_start.text}",
                                    inner_start.pos)
                return Const(-inner.value, t.pos)  # type: ignore[operator]
            if isinstance(inner, Neg):
                return inner.prop
            return Neg(inner, t.pos)
        if t.kind in ("NUMBER", "STRING"):
            self.take()
            return Const(t.value, t.pos)
        if t.kind == "KEYWORD" and t.text in ("TRUE", "FALSE", "NULL"):
            self.take()
            return Const({"TRUE": True, "FALSE": False, "NULL": None}[t.text], t.pos)
        if t.kind == "ID":
            self.take()
            if t.text.upper() == "LIKE":
                raise self.fail("LIKE is not supported (RocketMQ has none): use CONTAINS, "
                                "STARTSWITH or ENDSWITH", t.pos)
            if self.is_("ID") and self.tok.text.upper() == "LIKE":
                raise self.fail("LIKE is not supported (RocketMQ has none): use CONTAINS, "
                                "STARTSWITH or ENDSWITH")
            return Prop(t.text, t.pos)
        if self.is_("OP", "("):
            self.take()
            inner = self.or_expr()  # `(a)` is the value a, `(a > 1)` a condition
            self.expect("OP", ")", "')'")
            return inner
        raise self.fail(f"expected a property, a constant, NOT or '(', found "
                        f"{_describe(t)}")

    # checks
    def value(self, node: Condition | Value, start: Token, op: str) -> Value:
        if isinstance(node, Const | Prop | Neg):
            return node
        raise self.fail(f"{op} needs a property or a constant here, not a condition "
                        "(write NOT (a > 5), or compare properties)", start.pos)

    def property_of(self, node: Condition | Value, start: Token, op: str) -> Prop:
        if isinstance(node, Prop):
            return node
        raise self.fail(f"{op} applies to a property, found {_describe(start)}", start.pos)

    def comparison(self, op: str, left: Value, right: Value) -> Compare:
        for side in (left, right):
            if not isinstance(side, Const):
                continue
            if op in ORDERINGS or op == "BETWEEN":
                if not _is_number(side.value):
                    shown = "NULL" if side.value is None else self.text_at(side)
                    raise self.fail(f"{shown} cannot be compared with {op}: only numbers "
                                    "are ordered", side.pos)
            elif side.value is None:
                raise self.fail(f"NULL cannot be compared with {op}: use IS "
                                f"{'NOT ' if op == '<>' else ''}NULL", side.pos)
        return Compare(op, left, right)

    def text_at(self, const: Const) -> str:
        for t in self.tokens:
            if t.pos == const.pos:
                return t.text
        return repr(const.value)

    def condition(self, node: Condition | Value) -> Condition:
        if isinstance(node, Prop):
            return AsBoolean(node)
        if isinstance(node, Const):
            if node.value is None or isinstance(node.value, bool):
                return AsBoolean(node)
            raise FilterError(self.text, node.pos,
                              f"{self.text_at(node)} is not a condition (a comparison, "
                              "TRUE, FALSE or a property)")
        if isinstance(node, Neg):
            raise FilterError(self.text, node.pos, "a negated number is not a condition")
        return node


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def parse(text: str) -> Condition:
    """The syntax tree of a selector; FilterError says where and why it is wrong."""
    if not isinstance(text, str):
        raise TypeError("a selector is a str")
    return _Parser(text).parse()
