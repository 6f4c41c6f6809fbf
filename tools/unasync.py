"""Write the sync twin of each async source in `TWINS`; `--check` says if one is stale.

The async code is the one written by hand; its sync copy is generated beside it
(``retry.py`` -> ``retry_sync.py``) by rewriting Python tokens, so comments,
layout and docstrings carry over:

- ``async def`` / ``async for`` / ``async with`` lose ``async``; ``await x``
  becomes ``x``;
- the names in `BUILTIN_NAMES` (``aclose``, ``__aiter__``, ``StopAsyncIteration``,
  ``AsyncIterator``, ...) and the twin's own table (``with_retry`` ->
  ``with_retry_sync``, ``clock.sleep`` -> ``clock.sleep_sync``) are renamed:
  as code, and as words in strings and comments, so docstrings name the sync
  side; a key with a space is a phrase, renamed in strings and comments only;
- ``AsyncGenerator[Y, S]`` becomes ``Generator[Y, S, None]``;
- a statement with a comment that starts ``# unasync: async-only`` (with its
  indented block, for a ``def``, and the comment lines just above it) is left
  out of the copy: a re-export of the
  sync names from the async module, say;
- `Twin.text` lists exact replacements for what no name table can say (a
  doctest's ``asyncio.run``); each must match, so a stale one is an error;
  likewise a rename in a twin's table that the source never uses.

The copy then goes through ``ruff check --fix`` (import order; ``yield from``
for a loop that only yields, which an async generator cannot write) and ``ruff
format``, so it passes lint as written. Adding a twin is one entry in `TWINS`.

Usage::

    python tools/unasync.py          # write every copy
    python tools/unasync.py --check  # exit 1 if a copy is not what it would write
"""

from __future__ import annotations

import argparse
import io
import re
import shutil
import subprocess
import sys
import tokenize
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MARKER = "# unasync: async-only"

BUILTIN_NAMES: Mapping[str, str] = {
    "__aenter__": "__enter__",
    "__aexit__": "__exit__",
    "__aiter__": "__iter__",
    "__anext__": "__next__",
    "aclose": "close",
    "aclosing": "closing",
    "aiter": "iter",
    "anext": "next",
    "AsyncIterable": "Iterable",
    "AsyncIterator": "Iterator",
    "AsyncGenerator": "Generator",
    "AsyncContextManager": "ContextManager",
    "StopAsyncIteration": "StopIteration",
    "an async generator": "a generator",
    "An async generator": "A generator",
    "async generator": "generator",
    "async iterable": "iterable",
    "async iterator": "iterator",
}


@dataclass(frozen=True)
class Twin:
    """One async source and the sync copy generated from it.

    Attributes:
        source: The async module, relative to the repository root.
        target: The generated sync module, beside it.
        names: Renames for this pair, on top of `BUILTIN_NAMES`.
        text: Exact replacements made in the copy after renaming.
    """

    source: str
    target: str
    names: Mapping[str, str] = field(default_factory=dict[str, str])
    text: Sequence[tuple[str, str]] = ()


_HTTP = "http_resilience/src/http_resilience"
_MEDIATOR = "mediator/src/mediator"
_HTTP_TESTS = "tests/http_resilience"

TWINS: tuple[Twin, ...] = (
    Twin(
        f"{_HTTP}/_streams/retry.py",
        f"{_HTTP}/_streams/retry_sync.py",
        names={
            "with_retry": "with_retry_sync",
            "retry_stream": "retry_stream_sync",
            "_aclose": "_close",
            "_aclose_after_stop": "_close_after_stop",
            "clock.sleep": "clock.sleep_sync",
            "async loop": "sync loop",
        },
        text=(
            ("        >>> import asyncio\n", ""),
            (">>> asyncio.run(main())", ">>> main()"),
            (
                "sleep_sync`, also when\n"
                "    it is zero, so a cancellation is observed between attempts.",
                "sleep_sync`, also when\n    it is zero.",
            ),
            (
                "        # Awaited also when zero: the one place a cancellation "
                "requested while\n"
                "        # the source was failing synchronously is sure to be "
                "delivered.\n",
                "",
            ),
        ),
    ),
    Twin(
        f"{_HTTP}/_streams/resumable.py",
        f"{_HTTP}/_streams/resumable_sync.py",
        names={
            "resumable_bytes": "resumable_bytes_sync",
            "retry_stream": "retry_stream_sync",
            "_streams.retry": "_streams.retry_sync",
            "AsyncClient": "Client",
            "aiter_raw": "iter_raw",
        },
    ),
    Twin(
        f"{_HTTP}/_strategies/retry/drive.py",
        f"{_HTTP}/_strategies/retry/drive_sync.py",
        names={
            "AsyncDriver": "SyncDriver",
            "AsyncRetry": "SyncRetry",
            "handle": "handle_sync",
            "close_quietly": "close_quietly_sync",
            "clock.sleep": "clock.sleep_sync",
            "loop on an event loop": "loop, blocking",
        },
        text=(
            (
                "The async retry loop, `SyncRetry`: `RetryStrategy` driven on an "
                "event loop.",
                "The sync retry loop, `SyncRetry`: `RetryStrategy` driven blocking.",
            ),
            (
                "The sync loop, `drive_sync`,\nis generated from this module by "
                "``tools/unasync.py``: edit this one and run\nthe script.",
                "This sync loop is generated\nfrom `drive` by ``tools/unasync.py``: "
                "edit that one and run the script.",
            ),
        ),
    ),
    Twin(
        f"{_HTTP}/_clients/client.py",
        f"{_HTTP}/_clients/client_sync.py",
        names={
            "create_async_client": "create_client",
            "build_async_client": "build_client",
            "AsyncClient": "Client",
            "AsyncHTTPTransport": "HTTPTransport",
            "AsyncBaseTransport": "BaseTransport",
            "AsyncResilientTransport": "ResilientTransport",
            "AsyncProxyRouter": "ProxyRouter",
            "an async client needs async": "a sync client needs sync",
        },
        text=(
            ("sync=False", "sync=True"),
            ("        >>> import asyncio\n", ""),
            (">>> asyncio.run(main())", ">>> main()"),
            (
                "`pipeline` with `options` or `config`.",
                "`pipeline` with `options` or `config`, or a `pipeline` that\n"
                "            hedges: a blocking attempt cannot be cancelled.",
            ),
        ),
    ),
    Twin(
        f"{_HTTP}/_clients/env_proxies.py",
        f"{_HTTP}/_clients/env_proxies_sync.py",
        names={
            "AsyncProxyRouter": "ProxyRouter",
            "AsyncProxyMount": "ProxyMount",
            "AsyncHTTPTransport": "HTTPTransport",
            "AsyncBaseTransport": "BaseTransport",
            "handle_async_request": "handle_request",
        },
        text=(
            (
                '"""The async clients\' proxy router and mounts; the sync ones '
                "beside it.\n",
                '"""The sync clients\' proxy router and mounts.\n',
            ),
            (
                "The sync router and mount, in "
                "`http_resilience._clients.env_proxies_sync`,\nare generated "
                "from this module by ``tools/unasync.py``: edit this one and run"
                "\nthe script.\n",
                "Generated from `http_resilience._clients.env_proxies` by "
                "``tools/unasync.py``:\nedit that one and run the script.\n",
            ),
            ("an\n            `ProxyRouter`", "a\n            `ProxyRouter`"),
        ),
    ),
    Twin(
        f"{_MEDIATOR}/_dispatch/chain.py",
        f"{_MEDIATOR}/_dispatch/chain_sync.py",
        names={
            "AsyncRoute": "SyncRoute",
            "AsyncHandle": "SyncHandle",
            "PublishRoute": "SyncPublishRoute",
            "chain": "chain_sync",
            "chain_publish": "chain_publish_sync",
            "deliver_in_turn": "deliver_in_turn_sync",
            "AsyncAny": "SyncAny",
            "AsyncNone": "SyncNone",
            "notify": "notify_sync",
            "async path": "sync path",
        },
        text=(
            (
                "The sync copy, `chain_sync`, is generated from this "
                "module by\n``tools/unasync.py``: edit this one and run the script.",
                "This sync copy is generated from `chain` by\n"
                "``tools/unasync.py``: edit that one and run the script.",
            ),
        ),
    ),
    Twin(
        f"{_MEDIATOR}/_behaviors/transaction/drive.py",
        f"{_MEDIATOR}/_behaviors/transaction/drive_sync.py",
        names={
            "drive_attempt": "drive_attempt_sync",
            "AsyncUnitOfWork": "UnitOfWork",
            "arun": "run",
            "Next": "SyncNext",
            "async path": "sync path",
            "async driver": "sync driver",
        },
        text=(
            (
                "The sync driver, `drive_sync`, is generated from this\n"
                "module by ``tools/unasync.py``: edit this one and run the script.",
                "This sync driver is generated from `drive` by\n"
                "``tools/unasync.py``: edit that one and run the script.",
            ),
        ),
    ),
    Twin(
        f"{_MEDIATOR}/_behaviors/idempotency/drive.py",
        f"{_MEDIATOR}/_behaviors/idempotency/drive_sync.py",
        names={
            "drive_send": "drive_send_sync",
            "arun": "run",
            "Next": "SyncNext",
            "async driver": "sync driver",
        },
        text=(
            (
                "The sync\ndriver, `drive_sync`, is generated from this module by "
                "``tools/unasync.py``:\nedit this one and run the script.",
                "This sync\ndriver is generated from `drive` by "
                "``tools/unasync.py``: edit that one and\nrun the script.",
            ),
        ),
    ),
    Twin(
        f"{_MEDIATOR}/sqlalchemy/_unit_of_work.py",
        f"{_MEDIATOR}/sqlalchemy/_unit_of_work_sync.py",
        names={
            "AsyncSqlAlchemyUnitOfWork": "SqlAlchemyUnitOfWork",
            "AsyncSqlAlchemySavepoint": "SqlAlchemySavepoint",
            "AsyncSession": "Session",
            "AsyncSessionTransaction": "SessionTransaction",
            "AsyncUnitOfWork": "UnitOfWork",
        },
        text=(
            (
                "from sqlalchemy.ext.asyncio import Session, SessionTransaction",
                "from sqlalchemy.orm import Session, SessionTransaction",
            ),
            (
                '"""Units of work over a SQLAlchemy `Session`; the `Session` ones '
                "beside it.\n\nThe sync ones, in "
                "`mediator.sqlalchemy._unit_of_work_sync`, are generated from\n"
                "this module by ``tools/unasync.py``: edit this one and run the "
                "script.\n",
                '"""Units of work over a SQLAlchemy `Session`.\n\nGenerated from '
                "`mediator.sqlalchemy._unit_of_work` by ``tools/unasync.py``:\n"
                "edit that one and run the script.\n",
            ),
            (
                "_NO_DEADLINE = {FIRST_WRITE: True}\n",
                '__all__ = ["SqlAlchemySavepoint", "SqlAlchemyUnitOfWork"]\n\n'
                "_NO_DEADLINE = {FIRST_WRITE: True}\n",
            ),
        ),
    ),
    Twin(
        f"{_MEDIATOR}/sqlalchemy/_idempotency/store.py",
        f"{_MEDIATOR}/sqlalchemy/_idempotency/store_sync.py",
        names={
            "AsyncSqlAlchemyIdempotencyStore": "SqlAlchemyIdempotencyStore",
            "AsyncIdempotencyStore": "IdempotencyStore",
            "AsyncConnection": "Connection",
            "AsyncEngine": "Engine",
            "AsyncSession": "Session",
            "acreate_idempotency_table": "create_idempotency_table",
            "create_async_engine": "create_engine",
        },
        text=(
            (
                "from sqlalchemy.ext.asyncio import Connection, Engine, Session",
                "from sqlalchemy import Connection, Engine\n"
                "from sqlalchemy.orm import Session",
            ),
            (
                '"""The idempotency store on SQLAlchemy, async; the sync one beside '
                "it.\n\nThe sync store, in "
                "`mediator.sqlalchemy._idempotency.store_sync`, is generated\nfrom "
                "this module by ``tools/unasync.py``: edit this one and run the "
                "script.\n",
                '"""The idempotency store on SQLAlchemy, sync.\n\nGenerated from '
                "`mediator.sqlalchemy._idempotency.store` by ``tools/unasync.py``:"
                "\nedit that one and run the script.\n",
            ),
            (
                "# A claim reads the record",
                '__all__ = ["SqlAlchemyIdempotencyStore"]\n\n'
                "# A claim reads the record",
            ),
            ("        >>> import asyncio\n", ""),
            (">>> asyncio.run(main())", ">>> main()"),
            (
                "sqlalchemy.ext.asyncio import create_engine",
                "sqlalchemy import create_engine",
            ),
            ('"sqlite+aiosqlite://"', '"sqlite://"'),
        ),
    ),
    Twin(
        "mediator_resilience/src/mediator_resilience/_driver.py",
        "mediator_resilience/src/mediator_resilience/_driver_sync.py",
        names={
            "AsyncRetryDriver": "SyncRetryDriver",
            "handle": "handle_sync",
            "_retry_async": "_retry_sync",
            "AsyncRetrying": "Retrying",
            "_clock.sleep": "_clock.sleep_sync",
            "Next": "SyncNext",
            "async path": "sync path",
            "async driver": "sync driver",
        },
        text=(
            (
                "The sync driver, `_driver_sync`, is generated from this module by\n"
                "``tools/unasync.py``: edit this one and run the script.",
                "This sync driver is generated from `_driver` by\n"
                "``tools/unasync.py``: edit that one and run the script.",
            ),
        ),
    ),
    Twin(
        f"{_HTTP_TESTS}/core/test_pool_wait.py",
        f"{_HTTP_TESTS}/core/test_pool_wait_sync.py",
        names={
            "AsyncResilientTransport": "ResilientTransport",
            "AsyncHTTPTransport": "HTTPTransport",
            "AsyncClient": "Client",
            "gather": "gather_sync",
            "started": "started_sync",
            "fault_server.wait_idle": "fault_server.wait_idle_sync",
        },
        text=(
            ('SIDE = "async"', 'SIDE = "sync"'),
            (
                "The sync\ntests, in `test_pool_wait_sync`, are generated from "
                "these by\n"
                "``tools/unasync.py``: edit this module and run the script; what "
                "differs by\ncolour (tasks or threads) is in `pool_callers`.\n",
                "These sync\ntests are generated from `test_pool_wait` by "
                "``tools/unasync.py``: edit\nthat module and run the script; what "
                "differs by colour (tasks or threads)\nis in `pool_callers`.\n",
            ),
        ),
    ),
    Twin(
        f"{_HTTP_TESTS}/streams/test_with_retry.py",
        f"{_HTTP_TESTS}/streams/test_with_retry_sync.py",
        names={
            "with_retry": "with_retry_sync",
            "async_factory": "sync_factory",
            "bare_async_factory": "bare_sync_factory",
            "athrow": "throw",
            "test_an_async_generator_source_is_closed_when_the_consumer_stops": (
                "test_a_generator_source_is_closed_when_the_consumer_stops"
            ),
        },
        text=(
            (
                "The sync tests, `test_with_retry_sync`, are generated from these "
                "by\n``tools/unasync.py``: edit this module and run the script. "
                "Cancellation, the\nasync side's alone, is in "
                "`test_with_retry_by_colour`.",
                "Generated from `test_with_retry` by ``tools/unasync.py``: edit "
                "that module\nand run the script. Cancellation, the async side's "
                "alone, is in\n`test_with_retry_by_colour`.",
            ),
        ),
    ),
)


def _names_pattern(names: Mapping[str, str]) -> re.Pattern[str]:
    keys = sorted(names, key=len, reverse=True)
    return re.compile(r"(?<!\w)(" + "|".join(map(re.escape, keys)) + r")(?!\w)")


_ASYNC_WORDS = re.compile(r"\basync (?=def\b|for\b|with\b)|\bawait (?=[\w(\[])")


def _rewrite_text(
    text: str, names: Mapping[str, str], pattern: re.Pattern[str], used: set[str]
) -> str:
    """Rename inside a string or comment: async syntax in code samples, and words."""
    text = _ASYNC_WORDS.sub("", text)

    def renamed(found: re.Match[str]) -> str:
        used.add(found[1])
        return names[found[1]]

    return pattern.sub(renamed, text)


def _dropped_rows(
    tokens: list[tokenize.TokenInfo], source_lines: Sequence[str]
) -> set[int]:
    """The rows of every statement marked async-only: its block, comments above."""
    rows: set[int] = set()
    statement_start: int | None = None
    skip = (tokenize.NL, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT)
    index = 0
    while index < len(tokens):
        token = tokens[index]
        if token.type == tokenize.NEWLINE:
            statement_start = None
        elif token.type not in skip and statement_start is None:
            statement_start = token.start[0]
        elif token.type == tokenize.COMMENT and token.string.startswith(MARKER):
            if statement_start is None:
                raise SystemExit(f"line {token.start[0]}: {MARKER} ends a statement")
            end = index
            while tokens[end].type != tokenize.NEWLINE:
                end += 1
            last = tokens[end].end[0]
            if tokens[end + 1].type == tokenize.INDENT:
                depth = 0
                for follower in tokens[end + 1 :]:
                    depth += follower.type == tokenize.INDENT
                    depth -= follower.type == tokenize.DEDENT
                    if depth == 0:
                        break
                    last = max(last, follower.end[0])
            while source_lines[statement_start - 2].lstrip().startswith("#"):
                statement_start -= 1  # the comments just above go too
            rows.update(range(statement_start, last + 1))
            statement_start = None
            index = end
        index += 1
    return rows


def unasync(source: str, twin: Twin) -> str:
    """The sync copy of `source`, before formatting."""
    names = {**BUILTIN_NAMES, **twin.names}
    pattern = _names_pattern(names)
    code_names = {key: value for key, value in names.items() if " " not in key}
    used: set[str] = set()
    tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    lines = source.splitlines(keepends=True)
    dropped = _dropped_rows(tokens, lines)
    # (row, start column, end column, new text); rows are 1-based, one line each.
    edits: list[tuple[int, int, int, str]] = []
    significant = [
        token
        for token in tokens
        if token.type not in (tokenize.NL, tokenize.COMMENT, tokenize.NEWLINE)
    ]
    for position, token in enumerate(significant):
        row, column = token.start
        following = (
            significant[position + 1] if position + 1 < len(significant) else None
        )
        if token.type == tokenize.NAME and token.string in ("async", "await"):
            if token.string == "await" or (
                following is not None and following.string in ("def", "for", "with")
            ):
                assert following is not None
                stop = following.start[1] if following.start[0] == row else token.end[1]
                edits.append((row, column, stop, ""))
            continue
        if token.type == tokenize.NAME:
            key = _renamed_key(significant, position, code_names)
            if key is not None:
                used.add(key)
                renamed = code_names[key].split(".")[-1]
                edits.append((row, column, token.end[1], renamed))
                if (
                    following is not None
                    and following.string == "["
                    and (token.string == "AsyncGenerator")
                ):
                    closing = _matching_bracket(significant, position + 1)
                    close_row, close_column = closing.start
                    edits.append((close_row, close_column, close_column, ", None"))
        elif token.type == tokenize.STRING:
            _edit_text(token, names, pattern, lines, edits, used)
    for token in tokens:
        if token.type == tokenize.COMMENT and not token.string.startswith(MARKER):
            _edit_text(token, names, pattern, lines, edits, used)
    unused = sorted(set(twin.names) - used)
    if unused:
        raise SystemExit(f"{twin.source}: renames never used: {', '.join(unused)}")
    for row, start, stop, text in sorted(edits, reverse=True):
        line = lines[row - 1]
        lines[row - 1] = line[:start] + text + line[stop:]
    kept = [line for number, line in enumerate(lines, 1) if number not in dropped]
    result = "".join(kept)
    for old, new in twin.text:
        if old not in result:
            raise SystemExit(f"{twin.source}: text replacement not found: {old!r}")
        result = result.replace(old, new)
    header = (
        f"# Generated from {Path(twin.source).name} by tools/unasync.py; do not edit.\n"
        "# Edit the async source and run `python tools/unasync.py`.\n"
    )
    return header + result


def _renamed_key(
    tokens: list[tokenize.TokenInfo], position: int, names: Mapping[str, str]
) -> str | None:
    """The key (maybe dotted) of `names` that ends at the NAME token at `position`."""
    for key in names:
        parts = key.split(".")
        if parts[-1] != tokens[position].string or position < 2 * (len(parts) - 1):
            continue
        before = [tokens[position - 2 * back].string for back in range(len(parts))]
        dots = [tokens[position - 2 * back + 1].string for back in range(1, len(parts))]
        if before[::-1] == parts and all(dot == "." for dot in dots):
            return key
    return None


def _matching_bracket(
    tokens: list[tokenize.TokenInfo], opening: int
) -> tokenize.TokenInfo:
    depth = 0
    for token in tokens[opening:]:
        if token.type == tokenize.OP and token.string in "([{":
            depth += 1
        elif token.type == tokenize.OP and token.string in ")]}":
            depth -= 1
            if depth == 0:
                return token
    raise SystemExit("AsyncGenerator[...] without its closing bracket")


def _edit_text(
    token: tokenize.TokenInfo,
    names: Mapping[str, str],
    pattern: re.Pattern[str],
    lines: list[str],
    edits: list[tuple[int, int, int, str]],
    used: set[str],
) -> None:
    """Rename inside a (maybe multi-line) string or comment, line by line."""
    (first, start), (last, stop) = token.start, token.end
    for row in range(first, last + 1):
        line = lines[row - 1]
        begin = start if row == first else 0
        end = stop if row == last else len(line)
        rewritten = _rewrite_text(line[begin:end], names, pattern, used)
        if rewritten != line[begin:end]:
            edits.append((row, begin, end, rewritten))


def _ruff() -> str:
    beside = Path(sys.executable).parent / "ruff"
    found = str(beside) if beside.exists() else shutil.which("ruff")
    if found is None:
        raise SystemExit("tools/unasync.py needs ruff (make venv installs it)")
    return found


def formatted(code: str, target: str) -> str:
    """`code` as `ruff check --fix` and `ruff format` leave it (the repo's config)."""
    ruff = _ruff()
    check = [ruff, "check", "--fix-only", "--quiet", "--stdin-filename", target]
    for command in (
        [*check, "-"],
        # `async for x in y: yield x` has no `yield from`; its sync copy does.
        [*check, "--select", "UP028", "--unsafe-fixes", "-"],
        [ruff, "format", "--quiet", "--stdin-filename", target, "-"],
    ):
        done = subprocess.run(
            command, input=code, capture_output=True, text=True, cwd=ROOT, check=False
        )
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(command)} failed:\n{done.stderr}")
        code = done.stdout
    return code


def generate(twin: Twin) -> str:
    """The whole sync copy of `twin`, formatted."""
    source = (ROOT / twin.source).read_text(encoding="utf-8")
    return formatted(unasync(source, twin), twin.target)


def main(argv: Sequence[str] | None = None) -> int:
    """Write (or `--check`) every generated sync copy; 1 when one is stale."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--check", action="store_true", help="only say which copies are stale"
    )
    arguments = parser.parse_args(argv)
    stale: list[str] = []
    for twin in TWINS:
        expected = generate(twin)
        path = ROOT / twin.target
        current = path.read_text(encoding="utf-8") if path.exists() else None
        if current == expected:
            continue
        if arguments.check:
            stale.append(twin.target)
        else:
            path.write_text(expected, encoding="utf-8")
            print(f"wrote {twin.target}")
    for target in stale:
        print(f"{target} differs from its async source; run python tools/unasync.py")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
