"""Fixtures for testing code that uses `http_resilience`; a pytest plugin.

Installed with the package (entry point ``pytest11``, name
``http_resilience``), it adds fixtures and one warning: loading it imports
nothing of the package (each fixture imports what it needs when a test asks
for it), so it costs other test runs next to nothing, and coverage measures
the package from its first import.

- `http_fake_clock`: a fresh `http_resilience.testing.FakeClock` at 0 s.
- `http_events`: a fresh `EventRecorder` to give as a listener; it keeps
  every `HttpEvent`.
- `scripted_transport`: `ScriptedTransport`, to build a fake server that
  answers from a list: ``scripted_transport(503, 503, 200)``.
- `http_testing_mode`: `set_testing(True)` for the test (retries wait 0 s),
  restored after it.

It also watches one mocking tool: respx's httpx mocker
(``respx.mock(using="httpx")``) answers a client's requests above its
transport, so a resilient client's pipeline never runs. When a test's requests
of a resilient client were answered so, the plugin issues a
`BypassedPipelineWarning` naming the client (docs/testing.md, "Mocking
tools"). It looks only when respx is imported, and imports nothing for it.

To turn the plugin off: ``pytest -p no:http_resilience``.
"""

from __future__ import annotations

import sys
import warnings
from collections import Counter
from collections.abc import Generator, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, cast

import pytest

if TYPE_CHECKING:
    from http_resilience import HttpEvent
    from http_resilience.testing import EventRecorder, FakeClock, ScriptedTransport

__all__ = [
    "BypassedPipelineWarning",
    "http_events",
    "http_fake_clock",
    "http_testing_mode",
    "scripted_transport",
]


@pytest.fixture
def http_fake_clock() -> FakeClock:
    """A `FakeClock` at 0 s: give it as ``clock=``; sleeping moves it on at once."""
    from http_resilience.testing import FakeClock

    return FakeClock()


@pytest.fixture
def http_events() -> EventRecorder[HttpEvent]:
    """A listener keeping every event: give it in ``listeners=[...]``."""
    from http_resilience.testing import EventRecorder

    return EventRecorder()


@pytest.fixture
def scripted_transport() -> type[ScriptedTransport]:
    """`ScriptedTransport`: call it with the answers, in order."""
    from http_resilience.testing import ScriptedTransport

    return ScriptedTransport


@pytest.fixture
def http_testing_mode() -> Iterator[None]:
    """`set_testing(True)` for the test: every retry waits 0 s."""
    from http_resilience.testing import set_testing

    with set_testing(True):
        yield


class BypassedPipelineWarning(pytest.PytestWarning):
    """A mocking tool answered a resilient client's requests above its transport.

    respx's httpx mocker (``respx.mock(using="httpx")``) gives each request
    to respx before the client's own transport: the request never reaches
    the `ResilientTransport` or `AsyncResilientTransport`, so no retry,
    breaker or timeout runs for it. The plugin issues this warning after
    the test's call for the requests of its setup and call (after its
    teardown for those of the teardown), naming each client; in a test that
    failed it adds the same words to the failure as a note. Mock below the
    pipeline instead: respx's default mocker or pytest-httpx's ``httpx_mock``.
    """


# Per test: the name of the client of each request answered above its pipeline.
_BYPASSED = pytest.StashKey[list[str]]()


class _Spy:
    """Stands in for the client's transport in respx's `TryTransport`.

    respx's httpx mocker tries its mock first and this second (on a route's
    pass-through); `used` says whether the request came this far.
    """

    def __init__(self, transport: Any) -> None:
        self.transport = transport
        self.used = False

    def handle_request(self, request: Any) -> Any:
        self.used = True
        return self.transport.handle_request(request)

    async def handle_async_request(self, request: Any) -> Any:
        self.used = True
        return await self.transport.handle_async_request(request)


@contextmanager
def _spied(try_transport: Any, bypassed: list[str]) -> Generator[None]:
    """Note in `bypassed` when respx's mock answers for a resilient transport."""
    package = sys.modules.get("http_resilience")
    transports: object = getattr(try_transport, "transports", None)
    if package is None or not isinstance(transports, list) or not transports:
        # Nothing resilient exists before the package is imported.
        yield
        return
    resilient = (package.ResilientTransport, package.AsyncResilientTransport)
    own: object = cast("list[object]", transports)[-1]
    if not isinstance(own, resilient):
        yield
        return
    spy = _Spy(own)
    try_transport.transports = [*cast("list[object]", transports)[:-1], spy]
    try:
        yield
    finally:
        try_transport.transports = transports
        if not spy.used:
            bypassed.append(str(getattr(own, "name", "default")))


@contextmanager
def _watching(item: pytest.Item) -> Generator[None]:
    """While a test phase runs, watch respx's httpx mocker, if respx is imported.

    respx's httpx mocker routes each request of a client to a `TryTransport`
    of respx's mock and the client's own transport; the phase's requests of
    a resilient client that the mock answered are kept in the item's stash.
    """
    module = sys.modules.get("respx.transports")
    try_transport: Any = getattr(module, "TryTransport", None)
    if try_transport is None:
        yield
        return
    bypassed = item.stash.setdefault(_BYPASSED, [])
    sync_send = try_transport.handle_request
    async_send = try_transport.handle_async_request

    def handle_request(self: Any, request: Any) -> Any:
        with _spied(self, bypassed):
            return sync_send(self, request)

    async def handle_async_request(self: Any, request: Any) -> Any:
        with _spied(self, bypassed):
            return await async_send(self, request)

    try_transport.handle_request = handle_request
    try_transport.handle_async_request = handle_async_request
    try:
        yield
    finally:
        try_transport.handle_request = sync_send
        try_transport.handle_async_request = async_send


def _report(item: pytest.Item, failure: BaseException | None) -> None:
    """Warn of the requests answered above their pipeline so far, once each."""
    bypassed = item.stash.get(_BYPASSED, None)
    if not bypassed:
        return
    counts = Counter(bypassed)
    bypassed.clear()
    clients = ", ".join(
        f"{name!r} ({count} request{'' if count == 1 else 's'})"
        for name, count in counts.items()
    )
    message = (
        f"respx's httpx mocker answered resilient HTTP clients above their "
        f"pipeline: {clients}; no retry, circuit breaker or timeout ran for "
        f"those requests. Use respx's default mocker (respx.mock() without "
        f'using="httpx") or pytest-httpx\'s httpx_mock: both mock below the '
        f"pipeline."
    )
    if isinstance(failure, Exception):
        failure.add_note(message)
    path, line, _ = item.reportinfo()
    try:
        warnings.warn_explicit(
            BypassedPipelineWarning(message),
            BypassedPipelineWarning,
            filename=str(path),
            lineno=(line or 0) + 1,
        )
    except BypassedPipelineWarning:
        if failure is None:
            raise  # warnings are errors: the test fails with it
        # The failure stands, carrying the note.


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    """Watch respx's httpx mocker while fixtures are set up."""
    with _watching(item):
        yield


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    """Watch respx's httpx mocker while the test runs; warn after it."""
    yield from _watched_and_reported(item)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Iterator[None]:
    """Watch respx's httpx mocker while fixtures are torn down; warn after."""
    yield from _watched_and_reported(item)


def _watched_and_reported(item: pytest.Item) -> Iterator[None]:
    """A phase's wrapper: watch respx's httpx mocker while it runs; warn after.

    A failure of the phase carries the warning as a note, and stands.
    """
    with _watching(item):
        try:
            yield
        except BaseException as failure:
            _report(item, failure)
            raise
    _report(item, None)
