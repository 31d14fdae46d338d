"""SQL92 selectors: expressions x property sets with results written by hand.

Every case is checked through the three entry points of a compiled filter (a dict of
strings, the commitlog's encoded properties, the values read by someone else): they must
agree. Properties are strings, as in a message.
"""

from __future__ import annotations

import random

import pytest

from filter import FilterError, compile_sql
from filter.compiler import to_number

# Property sets.
EMPTY: dict[str, str] = {}
A7 = {"a": "7"}
A3 = {"a": "3"}
A5 = {"a": "5"}
A_FLOAT = {"a": "7.5"}
A_NEG = {"a": "-2"}
A_TEXT = {"a": "abc"}
A_EMPTY = {"a": ""}
TAG_X = {"TAGS": "x"}
TAG_Z = {"TAGS": "z"}
A7_TAG_X = {"a": "7", "TAGS": "x"}
A3_TAG_X = {"a": "3", "TAGS": "x"}
A7_TAG_Z = {"a": "7", "TAGS": "z"}
B_ABC = {"b": "abc"}
AB = {"a": "7", "b": "7"}
AB_DIFF = {"a": "7", "b": "07"}
FLAG_TRUE = {"flag": "TRUE"}
FLAG_NO = {"flag": "no"}
QUOTE = {"s": "it's"}
UNICODE = {"name": "zürich", "TAGS": "tag-ü"}

CASES: list[tuple[str, dict[str, str], bool]] = [
    # numbers: a property's text is read as a number against a number
    ("a > 5", A7, True),
    ("a > 5", A3, False),
    ("a > 5", A5, False),
    ("a >= 5", A5, True),
    ("a < 5", A3, True),
    ("a <= 5", A5, True),
    ("a = 7", A7, True),
    ("a = 7.0", A7, True),
    ("a <> 7", A7, False),
    ("a <> 7", A3, True),
    ("a > 5", A_FLOAT, True),  # RocketMQ's Integer.valueOf would fail here
    ("a > 7.25", A_FLOAT, True),
    ("a > 1.5E1", A_FLOAT, False),
    ("a < 0", A_NEG, True),
    ("a = -2", A_NEG, True),
    ("-a = 2", A_NEG, True),
    ("a > -3", A_NEG, True),
    ("a > 5L", A7, True),
    ("a > .5", A3, True),
    ("a BETWEEN 3 AND 7", A3, True),
    ("a BETWEEN 3 AND 7", A7, True),
    ("a BETWEEN 4 AND 6", A7, False),
    ("a NOT BETWEEN 4 AND 6", A7, True),
    ("a NOT BETWEEN 3 AND 7", A5, False),
    ("a BETWEEN 5 AND 5", A5, True),
    ("5 < 7", EMPTY, True),
    ("a > b", {"a": "10", "b": "9"}, True),  # two properties: compared as numbers
    # numbers as strings
    ("a = '7'", A7, True),  # string against string
    ("a = '7.0'", A7, False),  # ... so not numerically
    ("a = 7", {"a": "07"}, True),  # as a number
    ("a = '07'", {"a": "07"}, True),
    ("a = b", AB, True),
    ("a = b", AB_DIFF, False),  # two properties: compared as strings
    ("a <> b", AB_DIFF, True),
    ("'7' = 7", EMPTY, True),  # a string constant against a number is read as one
    # type mismatches: UNKNOWN, never an error, never a match
    ("a > 5", A_TEXT, False),
    ("a < 5", A_TEXT, False),
    ("a = 5", A_TEXT, False),
    ("a <> 5", A_TEXT, False),
    ("NOT (a > 5)", A_TEXT, False),
    ("a > 5", A_EMPTY, False),
    ("a > 5", {"a": "1_000"}, False),  # Java reads no underscores
    ("a > 5 OR b = 'abc'", {"a": "abc", "b": "abc"}, True),
    ("a = TRUE", A7, False),  # Boolean.valueOf("7") is false
    ("7 = TRUE", EMPTY, False),  # a number is never a boolean
    ("7 <> TRUE", EMPTY, True),
    ("a = 'abc'", A_TEXT, True),
    # strings
    ("b = 'abc'", B_ABC, True),
    ("b = 'ABC'", B_ABC, False),
    ("b <> 'abc'", B_ABC, False),
    ("b <> 'x'", B_ABC, True),
    ("TAGS = 'x'", TAG_X, True),
    ("TAGS IN ('x', 'y')", TAG_X, True),
    ("TAGS IN ('x', 'y')", TAG_Z, False),
    ("TAGS NOT IN ('x', 'y')", TAG_Z, True),
    ("TAGS NOT IN ('x', 'y')", TAG_X, False),
    ("TAGS IN ('a', 'b', 'c', 'd', 'e', 'x')", TAG_X, True),
    ("s = 'it''s'", QUOTE, True),
    ("name = 'zürich' AND TAGS IN ('tag-ü')", UNICODE, True),
    ("name CONTAINS 'ri'", UNICODE, True),
    ("b CONTAINS 'bc'", B_ABC, True),
    ("b CONTAINS 'x'", B_ABC, False),
    ("b NOT CONTAINS 'x'", B_ABC, True),
    ("b STARTSWITH 'ab'", B_ABC, True),
    ("b ENDSWITH 'ab'", B_ABC, False),
    ("b NOT ENDSWITH 'ab'", B_ABC, True),
    ("b CONTAINS ''", B_ABC, False),  # RocketMQ: an empty search never matches
    # NULL: a missing property
    ("a IS NULL", EMPTY, True),
    ("a IS NULL", A7, False),
    ("a IS NOT NULL", A7, True),
    ("a IS NOT NULL", A_EMPTY, True),  # empty is not missing
    ("a IS NOT NULL", EMPTY, False),
    ("a > 5", EMPTY, False),
    ("a <= 5", EMPTY, False),
    ("NOT (a > 5)", EMPTY, False),  # NOT UNKNOWN is UNKNOWN
    ("NOT (a <= 5)", EMPTY, False),
    ("a = 'x'", EMPTY, False),
    ("a <> 'x'", EMPTY, False),
    ("a = b", A7, False),
    ("a BETWEEN 1 AND 9", EMPTY, False),
    ("a NOT BETWEEN 1 AND 9", EMPTY, False),
    ("TAGS IN ('x')", EMPTY, False),
    ("TAGS NOT IN ('x')", EMPTY, False),
    ("b CONTAINS 'a'", EMPTY, False),
    ("b NOT CONTAINS 'a'", EMPTY, False),  # FALSE, not UNKNOWN, in RocketMQ ...
    ("NOT (b NOT CONTAINS 'a')", EMPTY, True),  # ... so its NOT is TRUE
    ("a > 5 OR a IS NULL", EMPTY, True),
    ("a > 5 AND a IS NULL", EMPTY, False),
    ("a > 5 OR TRUE", EMPTY, True),  # UNKNOWN OR TRUE
    ("NOT (a > 5 AND FALSE)", EMPTY, True),  # UNKNOWN AND FALSE is FALSE
    ("NOT (a > 5 OR FALSE)", EMPTY, False),  # UNKNOWN OR FALSE is UNKNOWN
    ("NULL IS NULL", EMPTY, True),
    ("'x' IS NULL", EMPTY, False),
    ("NULL", EMPTY, False),
    ("NOT NULL", EMPTY, False),
    # booleans
    ("TRUE", EMPTY, True),
    ("FALSE", EMPTY, False),
    ("NOT FALSE", EMPTY, True),
    ("flag = TRUE", FLAG_TRUE, True),  # Boolean.valueOf: "true" in any case
    ("flag = FALSE", FLAG_NO, True),  # ... anything else is false
    ("flag = TRUE", EMPTY, False),
    ("flag", FLAG_TRUE, False),  # a property is text, never a boolean (RocketMQ's cast)
    ("NOT flag", FLAG_TRUE, True),
    ("NOT flag", EMPTY, False),
    # precedence: OR < AND < NOT < comparisons; parentheses first
    ("a > 5 OR a < 2 AND TAGS = 'z'", A7_TAG_X, True),  # a > 5 OR (a < 2 AND ...)
    ("(a > 5 OR a < 2) AND TAGS = 'z'", A7_TAG_X, False),
    ("TAGS = 'z' AND a < 2 OR a > 5", A7_TAG_X, True),
    ("a > 5 AND TAGS IN ('x', 'y')", A7_TAG_X, True),
    ("a > 5 AND TAGS IN ('x', 'y')", A3_TAG_X, False),
    ("a > 5 AND TAGS IN ('x', 'y')", A7_TAG_Z, False),
    ("NOT a > 5", A3, True),  # NOT (a > 5), as in SQL92
    ("NOT a > 5 AND TAGS = 'x'", A3_TAG_X, True),  # (NOT (a > 5)) AND ...
    ("NOT (a > 5 AND TAGS = 'x')", A7_TAG_Z, True),
    ("NOT NOT a > 5", A7, True),
    ("NOT a IS NULL", A7, True),  # NOT (a IS NULL)
    ("a > 5 AND (TAGS = 'z' OR TAGS = 'x')", A7_TAG_X, True),
    ("((a)) > (5)", A7, True),
    # keywords in any case, comments
    ("a > 5 and tags in ('x')", {"a": "7", "tags": "x"}, True),
    ("a between 1 and 9 -- a comment\n", A7, True),
    ("/* block */ a > 5", A7, True),
    ("a IS not null", A7, True),
]


@pytest.mark.parametrize(("expression", "properties", "expected"), CASES)
def test_expression_on_properties(expression: str, properties: dict[str, str],
                                  expected: bool) -> None:
    f = compile_sql(expression)
    assert f.matches(properties) is expected, f.source
    encoded = "".join(f"{k}\x01{v}\x02" for k, v in properties.items()).encode()
    assert f.matches_encoded(encoded) is expected
    values = [properties[n].encode() if n in properties else None for n in f.properties]
    assert f.matches_values(*values) is expected


def test_the_encoded_form_reads_the_right_property() -> None:
    f = compile_sql("a = 'v'")
    assert f.matches_encoded(b"xa\x01no\x02a\x01v\x02") is True  # `xa` is not `a`
    assert f.matches_encoded(b"b\x01a\x02a\x01v") is True  # no trailing separator
    assert f.matches_encoded(b"b\x01a\x02") is False  # `a` as a value is no property
    assert f.matches_encoded(b"") is False
    assert compile_sql("TRUE").matches_encoded(b"") is True


def test_only_named_properties_are_read() -> None:
    f = compile_sql("a > 5 AND TAGS IN ('x') OR b IS NULL AND a < 100")
    assert f.properties == ["a", "TAGS", "b"]


@pytest.mark.parametrize(("expression", "tags"), [
    ("TAGS IN ('x', 'y')", {"x", "y"}),
    ("a > 5 AND TAGS IN ('x', 'y')", {"x", "y"}),
    ("TAGS IN ('x', 'y') AND a > 1 AND TAGS = 'y'", {"y"}),
    ("TAGS = 'x' OR a > 5", None),
    ("TAGS NOT IN ('x')", None),
    ("NOT TAGS IN ('x')", None),
    ("a > 5", None),
])
def test_tags_a_match_must_have(expression: str, tags: set[str] | None) -> None:
    assert compile_sql(expression).tags_only() == (None if tags is None else frozenset(tags))


@pytest.mark.parametrize(("expression", "column", "words"), [
    ("a >", 4, "found the end"),
    ("a > > 5", 5, "found '>'"),
    ("a > 5 b", 7, "expected AND, OR or the end"),
    ("a > 'x'", 5, "only numbers are ordered"),
    ("a BETWEEN 'a' AND 'b'", 11, "only numbers are ordered"),
    ("a = NULL", 5, "use IS NULL"),
    ("a <> NULL", 6, "use IS NOT NULL"),
    ("a BETWEEN 9 AND 1", 11, "low bound"),
    ("a != 1", 3, "use <>"),
    ("a = \"x\"", 5, "single quotes"),
    ("a = 'x", 5, "no closing quote"),
    ("", 1, "empty"),
    ("   ", 4, "empty"),
    ("a LIKE 'x%'", 3, "LIKE is not supported"),
    ("(a > 1) > 2", 1, "not a condition"),
    ("a IN (1, 2)", 7, "'string' in the IN list"),
    ("a IN ('x' 'y')", 11, "',' or ')'"),
    ("'x' IN ('x')", 1, "IN applies to a property"),
    ("5", 1, "is not a condition"),
    ("a > 5 AND 'x'", 11, "is not a condition"),
    ("a IS 5", 6, "NULL after IS"),
    ("(a > 5", 7, "expected ')'"),
    ("a > 99999999999999999999", 5, "out of range"),
    ("a > 5 AND", 10, "found the end"),
    ("a # 1", 3, "unexpected character '#'"),
    ("-'x' = a", 2, "unary - applies to numbers"),
])
def test_errors_say_where(expression: str, column: int, words: str) -> None:
    with pytest.raises(FilterError) as e:
        compile_sql(expression)
    assert e.value.column == column, str(e.value)
    assert words in str(e.value)
    assert f"at column {column}" in str(e.value)
    # The message repeats the expression with a caret under the column.
    lines = str(e.value).splitlines()
    assert lines[-1].index("^") - 2 == column - 1


@pytest.mark.parametrize(("text", "number"), [
    ("7", 7), ("-2", -2), ("+3", 3), ("7.5", 7.5), ("1e3", 1000.0), (" 5 ", 5),
    ("abc", None), ("", None), ("1_0", None), (None, None),
])
def test_to_number(text: str | None, number: float | None) -> None:
    assert to_number(text) == number


_WORDS = ["a", "b", "TAGS", "5", "-", "+", "1.5", "'x'", "'7'", "(", ")", ",", "=", "<>", ">",
          ">=", "<", "<=", "AND", "OR", "NOT", "BETWEEN", "IN", "IS", "NULL", "TRUE", "FALSE",
          "CONTAINS", "STARTSWITH", "ENDSWITH", "LIKE", "--c\n", "/*c*/", "1e3", "'", "!",
          "99999999999999999999", "0", "-0.0", "1e400", "$x"]
_PROPERTY_SETS = [EMPTY, {"a": "7", "b": "x", "TAGS": "x"}, {"a": "abc", "b": "5"},
                  {"a": "", "TAGS": "7"}, {"a": "nan", "b": "inf"}, {"a": "1e400"}]


def test_random_text_gives_a_filter_or_a_filter_error_and_every_entry_agrees() -> None:
    rng = random.Random(19)
    compiled = 0
    for _ in range(20_000):
        text = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(1, 9)))
        try:
            f = compile_sql(text)
        except FilterError:
            continue
        compiled += 1
        by_record = f.record_matcher(lambda record, names: None, _values_of)
        for props in _PROPERTY_SETS:
            expected = f.matches(props)
            encoded = "".join(f"{k}\x01{v}\x02" for k, v in props.items()).encode()
            values = [props[n].encode() if n in props else None for n in f.properties]
            assert isinstance(expected, bool), text
            assert f.matches_encoded(encoded) is expected, (text, props)
            assert f.matches_values(*values) is expected, (text, props)
            assert by_record(encoded) is expected, (text, props)
    assert compiled > 300


def _values_of(encoded: bytes, names: tuple[bytes, ...]) -> tuple[bytes | None, ...]:
    pairs = dict(p.split(b"\x01", 1) for p in encoded.split(b"\x02") if p)
    return tuple(pairs.get(n) for n in names)


@pytest.mark.parametrize("expression", [
    "(" * 3000 + "a > 1" + ")" * 3000,
    " OR ".join(["a > 1"] * 3000),
    "NOT " * 3000 + "a > 1",
])
def test_an_expression_nested_too_deeply_is_a_clear_error(expression: str) -> None:
    with pytest.raises(FilterError, match="nests too deeply"):
        compile_sql(expression)


def test_a_selector_that_does_not_parse_fails_at_once_in_the_client() -> None:
    """Before any broker is asked: a topic without a route yet would hide it until later."""
    from mqclient import MessageSelector
    with pytest.raises(FilterError, match="column 5"):
        MessageSelector.by_sql("a > AND")
    assert MessageSelector.by_sql("").expression == "TRUE"
