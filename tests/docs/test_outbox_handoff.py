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
PAGE = DOCS / "outbox.md"


def _section() -> tuple[Path, str, str]:
    """The page, the text before the section, and the section."""
    text = PAGE.read_text(encoding="utf-8")
    before, found, after = text.partition(HEADING + "\n")
    assert found, f"{PAGE.name} has no {HEADING!r}"
    return PAGE, before, after.split("\n## ", 1)[0]


def test_the_redis_streams_example_runs(
    redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    page, before, section = _section()
    setup = before
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
