"""The examples in the docstrings of `mediator.asgi` run and say what they show."""

from __future__ import annotations

import doctest
import importlib

import pytest

from tests.support.written_in import run_examples

MODULES = [
    "mediator.asgi",
    "mediator._asgi.domain_errors",
    "mediator._asgi.idempotency.middleware",
    "mediator._asgi.request_context",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    module = importlib.import_module(name)
    result = run_examples(module, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0
    assert result.failed == 0


def test_the_public_names_are_pinned() -> None:
    import mediator.asgi

    assert mediator.asgi.__all__ == [
        "DomainErrorMiddleware",
        "IdempotencyKeyMiddleware",
        "MiddlewareOrderError",
        "RequestContextMiddleware",
    ]
