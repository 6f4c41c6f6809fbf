"""docs/architecture.md maps the tree, and names no path that is not there.

Every folder that holds Python code under a distribution's ``src/<package>/``
must appear on the page as its path from ``src/`` in backticks
(```http_resilience/_core/```), and every backticked path on the page that
ends in ``/`` or ``.py`` must exist, read from the root of the work tree or
from a distribution's ``src/``.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "architecture.md"
SOURCES = sorted(ROOT.glob("*/src"))

# A backticked path: no spaces or backticks inside, ending in a slash or .py.
_PATH = re.compile(r"`([^`\s]+(?:/|\.py))`")


def named_paths(text: str) -> set[str]:
    """The backticked paths a page names, ending in ``/`` or ``.py``."""
    return set(_PATH.findall(text))


def code_folders() -> set[str]:
    """Each folder under ``*/src/<package>/`` that holds .py files, from ``src/``."""
    folders: set[str] = set()
    for source in SOURCES:
        for module in source.glob("*/**/*.py"):
            if "__pycache__" not in module.parts:
                folders.add(module.parent.relative_to(source).as_posix() + "/")
    return folders


def exists(path: str) -> bool:
    """Whether `path` is there from the work tree's root or from some ``src/``."""
    bases = [ROOT, *SOURCES]
    wanted = path.rstrip("/")
    for base in bases:
        found = base / wanted
        if found.is_dir() if path.endswith("/") else found.is_file():
            return True
    return False


def test_the_helpers_see_what_they_should() -> None:
    text = "see `a/b/`, `tools/unasync.py` and `x.txt`, not `two words/`"
    assert named_paths(text) == {"a/b/", "tools/unasync.py"}
    assert {"mediator/", "http_resilience/_core/"} <= code_folders()
    assert exists("tools/unasync.py")
    assert exists("http_resilience/_core/")
    assert not exists("http_resilience/_nowhere/")
    assert not exists("tools/unasync.py/")  # a file named as a folder
    assert not exists("tools/primitives.py")  # a folder named as a file


@pytest.mark.parametrize("folder", sorted(code_folders()))
def test_every_code_folder_is_on_the_page(folder: str) -> None:
    on_page = folder in named_paths(PAGE.read_text(encoding="utf-8"))
    assert on_page, f"docs/architecture.md does not map `{folder}`"


def test_every_path_the_page_names_exists() -> None:
    missing = sorted(
        p for p in named_paths(PAGE.read_text(encoding="utf-8")) if not exists(p)
    )
    assert missing == []
