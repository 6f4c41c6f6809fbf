"""The examples in the docstrings of `http_resilience` run and say what they show."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import http_resilience
from tests.support.written_in import WrittenHere

MODULES = sorted(
    info.name
    for info in pkgutil.walk_packages(http_resilience.__path__, "http_resilience.")
)


def test_every_module_is_collected() -> None:
    assert "http_resilience._streams.retry" in MODULES
    assert "http_resilience.testing" in MODULES


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    module = importlib.import_module(name)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    for test in WrittenHere().find(module, name):
        runner.run(test)
    assert runner.failures == 0
