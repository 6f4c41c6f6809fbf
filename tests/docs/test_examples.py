"""Every page in docs/ runs: its ```python blocks, in order, as one program.

Each page becomes a fresh module (registered in ``sys.modules``, so pydantic and
``register_from(__name__)`` see it as a real one) and its blocks run in it top to
bottom, so a block may use what an earlier block defined. A failure points at
the page and the line of the markdown file.
"""

from __future__ import annotations

import re
import sys
import types
from dataclasses import dataclass
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[2] / "docs"

# An opening fence: any indent (fences nest in admonitions), three or more
# backticks or tildes, and the info string (its first word is the language).
_FENCE = re.compile(r"^(?P<indent> *)(?P<fence>`{3,}|~{3,})\s*(?P<info>[^`]*)$")
_PYTHON = {"python", "py", "python3"}


@dataclass(frozen=True)
class Block:
    """One fenced code block: its language, its code and where it starts."""

    language: str
    code: str
    first_line: int  # 1-based line number of the first line of code


def code_blocks(text: str) -> list[Block]:
    """The fenced code blocks of a markdown text, in order."""
    blocks: list[Block] = []
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        opening = _FENCE.match(lines[index])
        index += 1
        if opening is None:
            continue
        fence = opening["fence"]
        indent = len(opening["indent"])
        words = opening["info"].split()
        body: list[str] = []
        start = index + 1
        while index < len(lines):
            line = lines[index]
            index += 1
            closing = line.strip()
            if set(closing) == {fence[0]} and len(closing) >= len(fence):
                break
            # Inside an admonition the code is indented as its fence is.
            body.append(line[indent:] if not line[:indent].strip() else line)
        else:
            raise ValueError(f"unclosed code fence opened on line {start - 1}")
        language = words[0].lower() if words else ""
        blocks.append(Block(language, "\n".join(body) + "\n", start))
    return blocks


def python_blocks(page: Path) -> list[Block]:
    return [
        block
        for block in code_blocks(page.read_text(encoding="utf-8"))
        if block.language in _PYTHON
    ]


PAGES = sorted(page for page in DOCS.rglob("*.md") if python_blocks(page))


def test_the_mediator_page_has_examples() -> None:
    # Guards the collection below: a page that lost its examples (or a parser
    # that stopped finding them) must not pass by running nothing.
    assert DOCS / "mediator.md" in PAGES
    assert len(python_blocks(DOCS / "mediator.md")) >= 10


@pytest.mark.parametrize(
    "page", PAGES, ids=[str(page.relative_to(DOCS)) for page in PAGES]
)
def test_page_examples_run_in_order(
    page: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = "docs_example_" + re.sub(r"\W", "_", str(page.relative_to(DOCS)))
    module = types.ModuleType(name)
    module.__file__ = str(page)
    monkeypatch.setitem(sys.modules, name, module)
    for block in python_blocks(page):
        # Padding with newlines makes tracebacks show the markdown line numbers.
        source = "\n" * (block.first_line - 1) + block.code
        exec(compile(source, str(page), "exec"), module.__dict__)


def test_code_blocks_parser() -> None:
    text = (
        "# Title\n"
        "```python\n"
        "a = 1\n"
        "```\n"
        "text\n"
        "````text\n"
        "```python\n"
        "not python\n"
        "```\n"
        "````\n"
        "!!! note\n"
        "    ```py\n"
        "    b = 2\n"
        "    ```\n"
    )
    assert code_blocks(text) == [
        Block("python", "a = 1\n", 3),
        Block("text", "```python\nnot python\n```\n", 7),
        Block("py", "b = 2\n", 13),
    ]
