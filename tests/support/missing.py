"""What a test does when a tool it needs is missing from the machine.

On a developer's machine it skips, saying what is missing. Under CI (the
``CI`` variable set, as `.ci/run` does) it fails: there a missing tool is a
broken set-up, and a skip would pass it off as green.
"""

from __future__ import annotations

import os
from typing import NoReturn

import pytest

__all__ = ["missing"]


def missing(reason: str, *, remedy: str) -> NoReturn:
    """Skip for `reason`; under CI fail, naming `remedy`."""
    if "CI" in os.environ:
        pytest.fail(
            f"{reason}; {remedy} (CI is set, so this is a failure)", pytrace=False
        )
    pytest.skip(reason)
