"""Checks every chaos scenario ends with: nothing left behind, nothing leaked.

`Leftovers` snapshots what a scenario could leave behind (asyncio tasks, file
descriptors, TCP sockets of this process) before it starts, and
`assert_back_to_baseline` waits a bounded time for the same figures after it
ends. The fault server and proxy run in threads of this process, so their
sockets count too: a connection the client forgot to close shows up twice.

`SecretWatch` collects everything a scenario lets out (log records with their
extras and tracebacks, events, exceptions with their causes, contexts and
notes) so `assert_absent` can show a planted secret appears in none of it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import traceback
from collections.abc import Generator
from contextlib import contextmanager
from dataclasses import dataclass, field

from http_resilience import SystemClock

__all__ = [
    "Leftovers",
    "SecretWatch",
    "assert_back_to_baseline",
    "assert_back_to_baseline_sync",
    "leftovers",
    "watch_secrets",
    "without_httpx_request_lines",
]

_CLOCK = SystemClock()
SETTLE_LIMIT = 5.0  # seconds a scenario's leftovers get to go away
POLL = 0.02  # seconds


@dataclass(frozen=True)
class Leftovers:
    """What this process holds at one moment."""

    tasks: int
    fds: int
    sockets: int

    def within(self, baseline: Leftovers) -> bool:
        return (
            self.tasks <= baseline.tasks
            and self.fds <= baseline.fds
            and self.sockets <= baseline.sockets
        )


def leftovers() -> Leftovers:
    """Count the running loop's tasks (0 outside a loop), fds and sockets."""
    try:
        tasks = len(asyncio.all_tasks())
    except RuntimeError:
        tasks = 0
    fds = 0
    sockets = 0
    for name in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
        except OSError:  # closed while listing (the listing's own fd)
            continue
        fds += 1
        sockets += target.startswith("socket:")
    return Leftovers(tasks=tasks, fds=fds, sockets=sockets)


async def assert_back_to_baseline(
    baseline: Leftovers, *, limit: float = SETTLE_LIMIT
) -> Leftovers:
    """Wait up to `limit` seconds for the figures to fall back to `baseline`.

    Closed connections take a moment to be noticed by the server's side, so
    the check polls rather than reading once. Returns the last reading.

    Raises:
        AssertionError: still above the baseline after `limit` seconds.
    """
    deadline = _CLOCK.monotonic() + limit
    now = leftovers()
    while not now.within(baseline) and _CLOCK.monotonic() < deadline:
        await _CLOCK.sleep(POLL)
        now = leftovers()
    assert now.within(baseline), f"left behind: {now} > baseline {baseline}"
    return now


def assert_back_to_baseline_sync(
    baseline: Leftovers, *, limit: float = SETTLE_LIMIT
) -> Leftovers:
    """`assert_back_to_baseline` for sync scenarios: it blocks the calling thread.

    The fault server closes its side of a connection on its own thread, so
    polling from the test's thread lets it get there. Returns the last reading.

    Raises:
        AssertionError: still above the baseline after `limit` seconds.
    """
    deadline = _CLOCK.monotonic() + limit
    now = leftovers()
    while not now.within(baseline) and _CLOCK.monotonic() < deadline:
        _CLOCK.sleep_sync(POLL)
        now = leftovers()
    assert now.within(baseline), f"left behind: {now} > baseline {baseline}"
    return now


class _Collect(logging.Handler):
    def __init__(self, texts: list[str]) -> None:
        super().__init__(level=logging.DEBUG)
        self._texts = texts
        self._formatter = logging.Formatter()

    def emit(self, record: logging.LogRecord) -> None:
        # Message, arguments, every extra attribute and the traceback.
        self._texts.append(repr(vars(record)))
        self._texts.append(record.getMessage())
        if record.exc_info:
            self._texts.append(self._formatter.formatException(record.exc_info))


@dataclass
class SecretWatch:
    """Everything a scenario let out, as text."""

    texts: list[str] = field(default_factory=list[str])

    def event(self, event: object) -> None:
        """Use as an event listener: keeps the event's repr."""
        self.texts.append(repr(event))

    def exception(self, error: BaseException) -> None:
        """Keep an exception's full rendering: chain, contexts, notes, group members."""
        self.texts.append("".join(traceback.format_exception(error)))
        self.texts.append(repr(error))
        self.texts.append(str(error))

    def assert_absent(self, *secrets: str) -> None:
        assert self.texts, (
            "nothing was collected: the watch saw no logs, events or exceptions"
        )
        for secret in secrets:
            hits = [text for text in self.texts if secret in text]
            assert not hits, f"secret {secret!r} leaked in: {hits[0][:500]}"


@contextmanager
def watch_secrets() -> Generator[SecretWatch]:
    """Collect every log record of every logger (DEBUG and up) while open."""
    watch = SecretWatch()
    handler = _Collect(watch.texts)
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        yield watch
    finally:
        root.removeHandler(handler)
        root.setLevel(level)


def _not_a_request_line(record: logging.LogRecord) -> bool:
    return not str(record.msg).startswith("HTTP Request:")


@contextmanager
def without_httpx_request_lines() -> Generator[None]:
    """Drop httpx's own ``HTTP Request: GET <URL>`` INFO records meanwhile.

    httpx logs every request with its whole URL, query string included, from
    the client, outside the resilience layer: an application that logs httpx
    at INFO has chosen to record its URLs. Only those records are dropped;
    every other httpx and httpcore record still reaches the secret watch.
    """
    logger = logging.getLogger("httpx")
    logger.addFilter(_not_a_request_line)
    try:
        yield
    finally:
        logger.removeFilter(_not_a_request_line)
