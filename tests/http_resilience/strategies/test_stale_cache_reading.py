"""The stale cache's one-pass header reading and its key hashing.

`read_request` and `read_response` read httpx's lower-cased triples in place
(or, on an httpx that keeps none, the raw pairs): names in any case and
spread over several lines count as the mapping would read them. The key's
hash tells apart any two sequences of parts, and gives equal parts equal keys.
"""

from __future__ import annotations

import httpx
import pytest

from http_resilience._strategies.stale_cache import rules
from http_resilience._strategies.stale_cache.rules import read_request, read_response
from http_resilience._strategies.stale_cache.store import StaleStore

URL = "http://inventory.example/items/1"


@pytest.fixture(params=["triples", "raw pairs"])
def header_reading(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each test runs on httpx's triples and on the way for an httpx without them."""
    if request.param == "raw pairs":
        monkeypatch.setattr(rules, "KEEPS_TRIPLES", False)


def answer(headers: list[tuple[str, str]], status: int = 200) -> httpx.Response:
    return httpx.Response(status, headers=headers)


@pytest.mark.usefixtures("header_reading")
def test_a_response_is_read_whatever_the_case_and_the_lines() -> None:
    response = answer(
        [
            ("CACHE-CONTROL", "Max-Age=10"),
            ("Content-Type", "text/plain"),
            ("cache-control", "stale-if-error=5"),
            ("VARY", "Accept-Language, accept"),
            ("Vary", "ACCEPT"),
            ("AGE", " 7 "),
        ]
    )
    assert read_response(response, 60.0, store_private=False) == (
        15.0,
        ("accept", "accept-language"),
        7.0,
    )


@pytest.mark.usefixtures("header_reading")
@pytest.mark.parametrize(
    "headers",
    [
        [("SET-COOKIE", "session=abc")],
        [("Cache-Control", "max-age=60"), ("Cache-Control", "NO-STORE")],
        [("cache-control", "Private")],
        [("Vary", "accept"), ("vary", "*")],
    ],
    ids=["set-cookie", "no-store on a second line", "private", "vary star"],
)
def test_a_response_is_refused_whatever_the_case_and_the_lines(
    headers: list[tuple[str, str]],
) -> None:
    assert read_response(answer(headers), 60.0, store_private=False) is None


@pytest.mark.usefixtures("header_reading")
def test_no_header_that_matters_is_the_window_alone() -> None:
    response = answer([("Content-Type", "text/plain"), ("Age", "x")])
    assert read_response(response, 60.0, store_private=False) == (60.0, (), 0.0)
    assert read_response(answer([]), 60.0, store_private=False) == (60.0, (), 0.0)


@pytest.mark.usefixtures("header_reading")
@pytest.mark.parametrize(
    "headers",
    [
        {"RANGE": "bytes=0-3"},
        {"Cache-Control": "max-age=0, NO-STORE"},
    ],
    ids=["range", "no-store"],
)
def test_a_request_left_alone_whatever_the_case(headers: dict[str, str]) -> None:
    assert read_request(httpx.Request("GET", URL, headers=headers)) is None
    assert read_request(httpx.Request("POST", URL)) is None


@pytest.mark.usefixtures("header_reading")
def test_the_key_tells_credentials_apart_by_header_and_by_value() -> None:
    store = StaleStore(max_entries=10, max_bytes=1000)

    def key(*headers: tuple[str, str]) -> bytes:
        parts = read_request(httpx.Request("GET", URL, headers=list(headers)))
        assert parts is not None
        return store.hash(parts)

    keys = {
        key(),
        key(("Authorization", "x")),
        key(("Cookie", "x")),
        key(("Authorization", "a"), ("Authorization", "b")),
        key(("Authorization", "a, b")),
        key(("Authorization", "a"), ("Cookie", "b")),
        key(("Cookie", "a"), ("Cookie", "b")),
    }
    assert len(keys) == 7
    # The same credentials in another case or order of headers: the same key.
    assert key(("COOKIE", "b"), ("authorization", "a")) == key(
        ("Authorization", "a"), ("Cookie", "b")
    )


def test_the_hash_tells_any_two_sequences_of_parts_apart() -> None:
    store = StaleStore(max_entries=10, max_bytes=1000)
    sequences: list[list[bytes]] = [
        [],
        [b""],
        [b"", b""],
        [b"ab", b"c"],
        [b"a", b"bc"],
        [b"abc"],
        [b"a\nb"],
        [b"a", b"b"],
        [b"1,1\nab"],
    ]
    assert len({store.hash(parts) for parts in sequences}) == len(sequences)


def test_equal_parts_hash_alike_whether_or_not_they_are_one_object() -> None:
    store = StaleStore(max_entries=10, max_bytes=1000)
    value = b"session=" + b"x" * 10
    copy = bytes(bytearray(value))
    assert copy is not value
    assert store.hash([value, value]) == store.hash([value, copy])
