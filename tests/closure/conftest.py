from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from ._workspace import REPO_ROOT


@pytest.fixture(scope="session")
def uv() -> Path:
    """The uv the Makefile bootstrapped into .tools/, else the one on PATH."""
    bootstrapped = REPO_ROOT / ".tools" / "bin" / "uv"
    if bootstrapped.is_file():
        return bootstrapped
    on_path = shutil.which("uv")
    if on_path is not None:
        return Path(on_path)
    message = "uv is neither at .tools/bin/uv nor on PATH: run `make venv` first"
    if "CI" in os.environ:
        # In CI a missing uv is a broken set-up, and a skip would pass it off as green.
        pytest.fail(f"{message} (CI is set, so this is a failure)", pytrace=False)
    pytest.skip(message)
