"""The Redis Streams example of the outbox's page runs, against a real Redis.

Its block is a ``text`` fence (the page's own run, tests/docs/test_examples.py,
has no Redis); here it runs after the page's Python blocks that come before
it, with the session's ``redis-server`` in place of the URL it shows.
"""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest

from tests.docs.test_examples import code_blocks
from tests.support.redis_server import RedisServer

DOCS = Path(__file__).resolve().parents[2] / "docs"
HEADING = "## Handing off to Redis Streams"
SHOWN_URL = "redis://127.0.0.1:6379/0"
# The page the section belongs to; until it is merged there, the snippet.
PAGES = [DOCS / "outbox.md", DOCS / "outbox-handoff-snippet.md"]


def _section() -> tuple[Path, str, str]:
    """The page holding the section, the text before it, and the section."""
    for page in PAGES:
        text = page.read_text(encoding="utf-8") if page.exists() else ""
        before, found, after = text.partition(HEADING + "\n")
        if found:
            section = after.split("\n## ", 1)[0]
            return page, before, section
    raise AssertionError(f"no page of {PAGES} has {HEADING!r}")


def test_the_redis_streams_example_runs(
    redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    page, before, section = _section()
    setup = (
        before
        if page.name == "outbox.md"
        else DOCS.joinpath("outbox.md").read_text(encoding="utf-8")
    )
    examples = [block for block in code_blocks(section) if block.language == "text"]
    assert len(examples) == 1
    code = examples[0].code
    assert SHOWN_URL in code
    name = "docs_example_outbox_handoff"
    module = types.ModuleType(name)
    module.__file__ = str(page)
    monkeypatch.setitem(sys.modules, name, module)
    for block in code_blocks(setup):
        if block.language == "python":
            exec(compile(block.code, str(page), "exec"), module.__dict__)
    example = code.replace(SHOWN_URL, redis_server.url)
    exec(compile(example, str(page), "exec"), module.__dict__)
    module.__dict__["client"].close()
