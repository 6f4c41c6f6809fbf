"""The bare `@retryable` marker."""

from __future__ import annotations

import pytest

from mediator import Command, Notification, Query
from mediator_resilience import is_retryable, retryable


@retryable
class GetPrice(Query[int]):
    sku: str


class GetDiscountedPrice(GetPrice):
    pass


class Charge(Command[str]):
    amount: int


def test_the_marker_is_bare_inherited_and_asked_of_classes_or_instances() -> None:
    assert is_retryable(GetPrice)
    assert is_retryable(GetDiscountedPrice)  # inherited
    assert is_retryable(GetPrice(sku="A"))
    assert not is_retryable(Charge)
    assert not is_retryable(Charge(amount=1))


def test_arguments_are_a_type_error_that_says_how_to_use_it() -> None:
    with pytest.raises(TypeError, match=r"called with arguments \(max_attempts=5\)"):
        retryable(max_attempts=5)
    with pytest.raises(TypeError, match="bare class decorator"):
        retryable()
    with pytest.raises(TypeError, match="no parentheses"):
        retryable(GetPrice, 3)


def test_it_goes_on_request_classes_only() -> None:
    class Shipped(Notification):
        pass

    def function() -> None: ...

    with pytest.raises(TypeError, match="got <function"):
        retryable(function)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="Shipped is not a request class"):
        retryable(Shipped)
    with pytest.raises(TypeError, match="got 42"):
        retryable(42)  # type: ignore[arg-type]
