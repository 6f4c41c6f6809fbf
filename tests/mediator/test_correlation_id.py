"""`mediator.correlation_id`: the one rule of a correlation id, refused loudly."""

from __future__ import annotations

import pytest

from mediator import correlation_id, current_correlation_id
from tests.support.written_in import run_examples

REFUSED = (
    "a correlation id is 1 to 200 visible ASCII characters without spaces or commas"
)


@pytest.mark.parametrize(
    "value", ["order-42", "a" * 200, "!#$%&'*+-./:;<=>?@[\\]^_`{|}~", "x"]
)
def test_a_valid_id_is_set_for_the_block(value: str) -> None:
    with correlation_id(value) as chosen:
        assert (chosen, current_correlation_id()) == (value, value)
    assert current_correlation_id() is None


@pytest.mark.parametrize(
    "value",
    [
        "",
        "a" * 201,
        "has space",
        "line\r\nbreak",
        "header\r\nX-Admin: 1",
        "nul\x00",
        "tab\t",
        "caf\u00e9",
        "del\x7f",
        "a,b",
        "a, b",
    ],
    ids=[
        "empty",
        "too-long",
        "space",
        "crlf",
        "header-injection",
        "nul",
        "tab",
        "non-ascii",
        "del",
        "comma",
        "comma-space",
    ],
)
def test_an_invalid_id_is_refused_without_repeating_it(value: str) -> None:
    with (
        pytest.raises(ValueError, match="visible ASCII") as raised,
        correlation_id(value),
    ):
        pass  # pragma: no cover - never entered
    assert str(raised.value) == REFUSED
    assert current_correlation_id() is None


@pytest.mark.parametrize("value", [None, 42, b"order-42"], ids=["none", "int", "bytes"])
def test_an_id_that_is_no_string_is_a_type_error(value: object) -> None:
    with (
        pytest.raises(TypeError, match=r"^a correlation id must be a string, got "),
        correlation_id(value),  # type: ignore[arg-type]
    ):
        pass  # pragma: no cover - never entered


def test_the_docstring_examples_run() -> None:
    import mediator._core.context

    result = run_examples(mediator._core.context)
    assert (result.attempted > 0, result.failed) == (True, 0)
