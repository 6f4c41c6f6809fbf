"""tools/unasync.py: the sync copies are current, and the rewriting rules hold."""

from __future__ import annotations

import pytest

from tools.unasync import TWINS, Twin, main, unasync

SOURCE = '''"""`fetch` reads an async iterable."""

from collections.abc import AsyncGenerator, AsyncIterator

from pkg.fetch_sync import fetch_sync as fetch_sync  # unasync: async-only


async def fetch(source: AsyncIterator[int], clock: Clock) -> AsyncGenerator[int, None]:
    """`fetch` awaits `clock.sleep`: `[n async for n in fetch(s)]`."""
    async with lock:
        async for item in source:
            yield item
    await clock.sleep(0)
    await source.aclose()
    raise StopAsyncIteration
'''


def test_every_copy_is_what_the_script_writes() -> None:
    assert main(["--check"]) == 0


def test_each_twin_is_a_source_and_its_sync_copy() -> None:
    for twin in TWINS:
        assert twin.target == twin.source.removesuffix(".py") + "_sync.py"


def test_the_rewriting_rules() -> None:
    twin = Twin(
        "fetch.py",
        "fetch_sync.py",
        names={"fetch": "fetch_sync", "clock.sleep": "clock.sleep_sync"},
    )
    copy = unasync(SOURCE, twin)
    assert copy.startswith("# Generated from fetch.py by tools/unasync.py")
    body = copy.split("\n", 2)[2]
    assert "async" not in body
    assert "pkg.fetch_sync" not in copy
    assert (
        "def fetch_sync(source: Iterator[int], clock: Clock) -> "
        "Generator[int, None, None]:" in copy
    )
    assert (
        "`fetch_sync` awaits `clock.sleep_sync`: `[n for n in fetch_sync(s)]`" in copy
    )
    assert "    with lock:\n        for item in source:" in copy
    assert (
        "    clock.sleep_sync(0)\n    source.close()\n    raise StopIteration\n" in copy
    )
    assert '"""`fetch_sync` reads an iterable."""' in copy


def test_a_rename_the_source_never_uses_is_an_error() -> None:
    twin = Twin(
        "fetch.py",
        "fetch_sync.py",
        names={"fetch": "fetch_sync", "fetch_all": "fetch_all_sync"},
    )
    with pytest.raises(SystemExit, match="renames never used: fetch_all"):
        unasync(SOURCE, twin)


def test_a_rename_used_only_in_prose_counts_as_used() -> None:
    twin = Twin("fetch.py", "fetch_sync.py", names={"reads an": "reads a sync"})
    assert "`fetch` reads a sync iterable" in unasync(SOURCE, twin)
