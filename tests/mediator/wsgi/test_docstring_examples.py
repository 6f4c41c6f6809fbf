"""The examples in the docstrings of `mediator.wsgi` run; its names are pinned."""

from __future__ import annotations

import doctest
import importlib

import pytest

from mediator import asgi, wsgi
from tests.support.written_in import run_examples

MODULES = [
    "mediator.wsgi",
    "mediator._wsgi.domain_errors",
    "mediator._wsgi.request_context",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    module = importlib.import_module(name)
    result = run_examples(module, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0
    assert result.failed == 0


def test_the_public_names_are_pinned() -> None:
    assert wsgi.__all__ == [
        "DomainErrorMiddleware",
        "MiddlewareOrderError",
        "RequestContextMiddleware",
    ]


def test_the_order_error_is_the_asgi_middlewares_own() -> None:
    assert wsgi.MiddlewareOrderError is asgi.MiddlewareOrderError
