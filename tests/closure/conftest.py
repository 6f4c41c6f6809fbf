from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.support.missing import missing

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
    missing(
        "uv is neither at .tools/bin/uv nor on PATH",
        remedy="run `make venv` first",
    )
