"""The canonical form and fingerprint of a request, with property tests."""

from __future__ import annotations

import json
import unicodedata
from dataclasses import dataclass
from decimal import Decimal
from typing import Annotated, Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import SecretBytes, SecretStr

from mediator import Command, Sensitive
from mediator._behaviors.idempotency.fingerprint import (
    canonical_number,
    canonical_text,
    fingerprint,
)


class Bag(Command[None]):
    """A request with one field of anything."""

    value: Any = None


class Pay(Command[None]):
    request_id: str = ""
    card: Annotated[str, Sensitive()]
    pin: SecretStr
    blob: SecretBytes = SecretBytes(b"")
    amount: Decimal


@dataclass(frozen=True)
class Line:
    sku: str
    qty: int


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.text(max_size=5), inner, max_size=4)
    ),
    max_leaves=20,
)


@given(st.dictionaries(st.text(max_size=5), json_values, max_size=6), st.randoms())
def test_key_order_does_not_matter(value: dict[str, Any], random: Any) -> None:
    items = list(value.items())
    random.shuffle(items)
    assert canonical_text(Bag(value=value)) == canonical_text(Bag(value=dict(items)))


@given(json_values)
def test_the_canonical_text_is_json(value: Any) -> None:
    json.loads(canonical_text(Bag(value=value)))


@given(st.integers(), st.integers(min_value=0, max_value=5))
def test_an_integer_has_one_form_whatever_its_type(n: int, zeros: int) -> None:
    forms = {canonical_number(n), canonical_number(Decimal(n))}
    forms.add(canonical_number(Decimal(f"{n}.{'0' * zeros}")))
    if abs(n) < 2**53:
        forms.add(canonical_number(float(n)))
    assert len(forms) == 1


@given(st.decimals(allow_nan=False, allow_infinity=False))
def test_a_number_reads_back_as_its_value(value: Decimal) -> None:
    assert Decimal(canonical_number(value)) == value


@given(st.floats(allow_nan=False, allow_infinity=False))
def test_a_float_is_its_shortest_repr(value: float) -> None:
    assert canonical_number(value) == canonical_number(Decimal(repr(value)))
    assert float(Decimal(canonical_number(value))) == value


@given(
    st.decimals(allow_nan=False, allow_infinity=False),
    st.decimals(allow_nan=False, allow_infinity=False),
)
def test_different_numbers_have_different_forms(a: Decimal, b: Decimal) -> None:
    assert (canonical_number(a) == canonical_number(b)) == (a == b)


@given(st.text())
def test_strings_are_compared_in_nfc(text: str) -> None:
    nfd = unicodedata.normalize("NFD", text)
    nfc = unicodedata.normalize("NFC", text)
    assert canonical_text(Bag(value=nfd)) == canonical_text(Bag(value=nfc))
    assert canonical_text(Bag(value={nfd: 1})) == canonical_text(Bag(value={nfc: 1}))


def test_numbers_in_one_form() -> None:
    assert [
        canonical_number(v)
        for v in (0, -0.0, Decimal("0.000"), 1, 1.0, Decimal("1.00"), 0.1, 1e300)
    ] == ["0", "0", "0", "1e0", "1e0", "1e0", "1e-1", "1e300"]
    assert canonical_number(Decimal("1E+999999999")) == "1e999999999"  # stays short
    assert [canonical_number(v) for v in (float("nan"), float("-inf"))] == [
        "NaN",
        "-Infinity",
    ]


def test_sensitive_values_never_appear_in_clear() -> None:
    request = Pay(
        request_id="k",
        card="4111111111111111",
        pin=SecretStr("8642"),
        blob=SecretBytes(b"hidden"),
        amount=Decimal("10.00"),
    )

    text = canonical_text(request, exclude="request_id")

    for secret in ("4111111111111111", "8642", "hidden", "aGlkZGVu"):
        assert secret not in text
    assert '"card":{"sha256":"' in text
    assert '"amount":1e1' in text
    assert '"request_id"' not in text
    other_card = request.model_copy(update={"card": "4000000000000002"})
    assert fingerprint(other_card) != fingerprint(request)


def test_the_key_field_is_left_out_and_the_type_is_in() -> None:
    one = Pay(request_id="a", card="1", pin=SecretStr("2"), amount=Decimal(1))
    two = Pay(request_id="b", card="1", pin=SecretStr("2"), amount=Decimal("1.0"))

    assert fingerprint(one, exclude="request_id") == fingerprint(
        two, exclude="request_id"
    )
    assert fingerprint(one) != fingerprint(two)
    assert fingerprint(Bag(value=1)) != fingerprint(Bag(value=2))
    assert len(fingerprint(Bag())) == 64


def test_containers_and_other_values() -> None:
    import datetime
    import uuid

    value = {
        "set": {3, 1, 2},
        "tuple": (1, "a"),
        "line": Line("A", 2),
        "bytes": b"\x00\xff",
        "when": datetime.date(2030, 1, 2),
        "id": uuid.UUID(int=1),
        1: "int key",
    }
    text = canonical_text(Bag(value=value))

    assert '"set":[1e0,2e0,3e0]' in text
    assert '"tuple":[1e0,"a"]' in text
    assert '"line":{"qty":2e0,"sku":"A"}' in text
    assert '"bytes":"AP8="' in text
    assert '"when":"2030-01-02"' in text
    assert '"id":"00000000-0000-0000-0000-000000000001"' in text
    assert '"1e0":"int key"' in text


def test_a_value_nested_too_deeply_is_refused() -> None:
    deep: Any = 1
    for _ in range(70):
        deep = [deep]
    with pytest.raises(ValueError, match="deeper than 64 levels"):
        fingerprint(Bag(value=deep))
