"""The examples in the docstrings of the fallback modules run and say what they show."""

from __future__ import annotations

import doctest
import importlib

import pytest

from tests.support.written_in import run_examples

MODULES = [
    "mediator._behaviors.fallback.behavior",
    "mediator._behaviors.fallback.handler",
    "mediator._behaviors.fallback.marker",
    "mediator._core.degradation",
    "mediator._asgi.answers",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    module = importlib.import_module(name)
    result = run_examples(module, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0
    assert result.failed == 0
