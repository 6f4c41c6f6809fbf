"""Reading published quota: RFC 9651 Lists, the RateLimit fields, the legacy triple.

Whatever a server sends, nothing raises: a field that does not parse is
ignored whole. The property tests run at least 1,000 examples each, over
arbitrary text and over fields built to the grammar.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from http_resilience._core.quota_headers import (
    MAX_RESET,
    Quota,
    legacy_quota,
    standard_quota,
)
from http_resilience._core.structured_fields import SfItem, parse_list

MANY = settings(max_examples=1_000, deadline=None)

# --- RFC 9651 Lists ------------------------------------------------------------


def test_members_with_parameters_of_every_bare_type() -> None:
    members = parse_list(
        ['"burst";q=100;w=60, day;q=-5;x=1.25;y="a\\"b\\\\c";z=?0;b=:AQI=:;d=@1;flag']
    )
    assert list(members or ()) == [
        SfItem("burst", {"q": 100, "w": 60}),
        SfItem(
            "day",
            {
                "q": -5,
                "x": 1.25,
                "y": 'a"b\\c',
                "z": False,
                "b": b"AQI=",
                "d": 1,
                "flag": True,
            },
        ),
    ]


def test_lines_sent_apart_are_one_list_and_inner_lists_parse() -> None:
    assert list(parse_list(['"a";q=1', '  "b";q=2 ']) or ()) == [
        SfItem("a", {"q": 1}),
        SfItem("b", {"q": 2}),
    ]
    assert list(parse_list(['("x" "y");q=1, 5']) or ()) == [
        SfItem(("x", "y"), {"q": 1}),
        SfItem(5, {}),
    ]


@pytest.mark.parametrize(
    "text",
    [
        "",
        " ",
        '"burst";q=100,',  # a trailing comma
        '"burst" "day"',  # two items without a comma
        '"open',
        '"tab\there"',
        '"bad\\escape"',
        "q=1",  # a parameter with no item: reads as a token, then garbage
        '"a";Q=1',  # keys are lower case
        '"a";q=1.2345',  # at most 3 decimals
        '"a";q=1234567890123456',  # at most 15 digits
        '"a";q=--1',
        '"a";q=?2',
        '%"display"',
        '("a" "b"',
        '"a";q=\uff11',  # FULLWIDTH DIGIT ONE
    ],
)
def test_a_field_that_does_not_parse_is_ignored_whole(text: str) -> None:
    assert parse_list([text]) is None


@MANY
@given(st.lists(st.text(), max_size=3))
def test_arbitrary_text_never_raises(lines: list[str]) -> None:
    result = parse_list(lines)
    assert result is None or all(isinstance(item, SfItem) for item in result)


# Keys are `[a-z*][a-z0-9_.*-]{0,6}` and tokens
# `[A-Za-z*][A-Za-z0-9!#$%&'*+.^_`|~:/-]{0,6}`: built as a first character and a
# text of the rest, the same strings `from_regex` gives, drawn in two choices
# rather than one per character.
LOWER = "abcdefghijklmnopqrstuvwxyz"
LETTERS = LOWER + LOWER.upper()
KEYS = st.builds(
    str.__add__,
    st.sampled_from(LOWER + "*"),
    st.text(LOWER + "0123456789_.*-", max_size=6),
)
TOKENS = st.builds(
    str.__add__,
    st.sampled_from(LETTERS + "*"),
    st.text(LETTERS + "0123456789!#$%&'*+.^_`|~:/-", max_size=6),
)
STRINGS = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=8)
INTEGERS = st.integers(min_value=-(10**15) + 1, max_value=10**15 - 1)
BARE = st.one_of(INTEGERS, STRINGS, TOKENS, st.booleans())
# Built once: a strategy made inside `members` is made and validated per draw.
PARAMETERS = st.dictionaries(
    KEYS, st.one_of(INTEGERS, TOKENS, st.booleans()), max_size=3
)


def serialize(value: object) -> str:
    if isinstance(value, bool):
        return "?1" if value else "?0"
    if isinstance(value, int):
        return str(value)
    assert isinstance(value, str)
    return value


@st.composite
def members(draw: st.DrawFn) -> tuple[str, SfItem]:
    kind = draw(st.sampled_from(["string", "token", "integer", "boolean"]))
    value: object
    if kind == "string":
        value = draw(STRINGS)
        text = '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    elif kind == "token":
        value = draw(TOKENS)
        text = value
    elif kind == "integer":
        value = draw(INTEGERS)
        text = str(value)
    else:
        value = draw(st.booleans())
        text = serialize(value)
    parameters = draw(PARAMETERS)
    for key, parameter in parameters.items():
        text += f";{key}" if parameter is True else f";{key}={serialize(parameter)}"
    return text, SfItem(value, parameters)  # type: ignore[arg-type]


@MANY
@given(
    st.lists(members(), min_size=1, max_size=4), st.sampled_from([",", ", ", " ,\t"])
)
def test_a_list_built_to_the_grammar_reads_back_as_built(
    built: list[tuple[str, SfItem]], separator: str
) -> None:
    text = separator.join(member for member, _ in built)
    assert list(parse_list([text]) or ()) == [item for _, item in built]


# --- the RateLimit fields --------------------------------------------------------


def test_each_report_takes_the_quota_of_its_policy() -> None:
    quotas = standard_quota(
        ['"burst";q=100;w=60, "day";q=5000;w=86400'],
        ['"burst";r=9;t=30, "day";r=4000;t=3600, "other";r=3'],
    )
    assert quotas == [
        Quota(remaining=9, limit=100, reset=30.0),
        Quota(remaining=4000, limit=5000, reset=3600.0),
        Quota(remaining=3, limit=None, reset=None),
    ]


@pytest.mark.parametrize(
    ("policy", "ratelimit"),
    [
        ([], []),
        (['"burst";q=100'], []),
        (['"burst";q=100'], ['"burst";r=-1;t=5']),  # no negative remaining
        (['"burst";q=100'], ['"burst";r=?1;t=5']),  # a boolean is no count
        (['"burst";q=100'], ['"burst";r=1.5;t=5']),
        (['"burst";q=100'], ['"burst";t=5']),
        (['"burst";q=100'], ['"burst";r=1,']),  # does not parse
    ],
)
def test_no_usable_remaining_count_is_no_quota(
    policy: list[str], ratelimit: list[str]
) -> None:
    assert standard_quota(policy, ratelimit) == []


def test_a_bad_policy_field_leaves_the_reports_without_a_quota() -> None:
    assert standard_quota(['"burst";q=100,,'], ['"burst";r=1;t=2']) == [
        Quota(remaining=1, limit=None, reset=2.0)
    ]


def test_a_reset_is_capped_at_a_day() -> None:
    (quota,) = standard_quota([], ['"x";r=0;t=999999999'])
    assert quota.reset == MAX_RESET


@MANY
@given(st.lists(st.text(), max_size=2), st.lists(st.text(), max_size=2))
def test_the_ratelimit_fields_never_raise(
    policy: list[str], ratelimit: list[str]
) -> None:
    for quota in standard_quota(policy, ratelimit):
        assert quota.remaining >= 0
        assert quota.limit is None or quota.limit >= 0
        assert quota.reset is None or 0.0 <= quota.reset <= MAX_RESET


# --- the legacy triple -----------------------------------------------------------


def test_the_legacy_triple_in_seconds_and_as_a_unix_time() -> None:
    assert legacy_quota(["100"], ["7"], ["30"], now=0.0) == Quota(7, 100, 30.0)
    assert legacy_quota(["100"], ["7"], ["1700000030"], now=1_700_000_000.0) == (
        Quota(7, 100, 30.0)
    )
    # A reset already passed is now; a limit with a comment after it is read.
    assert legacy_quota(["100, 100;w=60"], ["0"], ["1600000000"], now=1.7e9) == (
        Quota(0, 100, 0.0)
    )


@pytest.mark.parametrize(
    ("limit", "remaining", "reset", "expected"),
    [
        (["100"], [], ["30"], None),  # no remaining count: no quota
        (["100"], ["-1"], ["30"], None),
        (["100"], ["7", "8"], ["30"], None),  # sent twice: which?
        (["100"], ["\u0667"], ["30"], None),  # ARABIC-INDIC SEVEN
        (["lots"], ["7"], ["30"], Quota(7, None, 30.0)),
        ([], ["7"], ["soon"], Quota(7, None, None)),
        (["100"], [" 7 "], ["2.5"], Quota(7, 100, 2.5)),
    ],
)
def test_the_legacy_triple_reads_what_it_can(
    limit: list[str], remaining: list[str], reset: list[str], expected: Quota | None
) -> None:
    assert legacy_quota(limit, remaining, reset, now=0.0) == expected


@MANY
@given(
    st.lists(st.text(), max_size=2),
    st.lists(st.text(), max_size=2),
    st.lists(st.text(), max_size=2),
    st.floats(min_value=0, max_value=4e9),
)
def test_the_legacy_triple_never_raises(
    limit: list[str], remaining: list[str], reset: list[str], now: float
) -> None:
    quota = legacy_quota(limit, remaining, reset, now=now)
    if quota is not None:
        assert quota.remaining >= 0
        assert quota.reset is None or 0.0 <= quota.reset <= MAX_RESET


@MANY
@given(
    st.integers(min_value=0, max_value=10**9),
    st.integers(min_value=0, max_value=10**9),
    st.integers(min_value=0, max_value=86_400),
)
def test_plain_numbers_read_back(limit: int, remaining: int, reset: int) -> None:
    assert legacy_quota([str(limit)], [str(remaining)], [str(reset)], now=0.0) == (
        Quota(remaining, limit, float(reset))
    )


NAMES = st.one_of(
    TOKENS.map(lambda token: (token, token)),
    STRINGS.map(
        lambda text: ('"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"', text)
    ),
)


@MANY
@given(
    name=NAMES,
    left=st.integers(min_value=0, max_value=10**15 - 1),
    reset=st.integers(min_value=0, max_value=10**15 - 1),
    quota=st.integers(min_value=0, max_value=10**6),
)
def test_the_usual_report_reads_as_the_whole_grammar_reads_it(
    name: tuple[str, str], left: int, reset: int, quota: int
) -> None:
    # One report, `name;r=..;t=..`, is read without building the List: it
    # must read exactly as the grammar does.
    shown, value = name
    text = f"{shown};r={left};t={reset}"
    members = parse_list([text])
    assert members is not None
    assert list(members) == [SfItem(value, {"r": left, "t": reset})]
    expected = [Quota(remaining=left, limit=quota, reset=min(float(reset), MAX_RESET))]
    policy = [f"{shown};q={quota}"]
    assert standard_quota(policy, [text]) == expected
    assert standard_quota(policy, [f" {text}  "]) == expected
