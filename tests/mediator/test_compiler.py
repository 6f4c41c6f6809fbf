"""The route compiler: the collector is held off during a build, and put back."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from mediator import Query, QueryHandler
from mediator._dispatch.compiler import collector_paused
from tests.mediator._support.support import build


class Ping(Query[int]):
    pass


class PingHandler(QueryHandler[Ping, int]):
    def handle(self, request: Ping) -> int:
        return 1


@pytest.fixture
def collector() -> Iterator[None]:
    was = gc.isenabled()
    yield
    if was:
        gc.enable()
    else:
        gc.disable()


@pytest.mark.usefixtures("collector")
@pytest.mark.parametrize("enabled", [True, False])
def test_a_build_leaves_the_collector_as_it_found_it(enabled: bool) -> None:
    if enabled:
        gc.enable()
    else:
        gc.disable()

    mediator = build(lambda m: m.add_handler(PingHandler).use_defaults())

    assert gc.isenabled() is enabled
    assert mediator.send_sync(Ping()) == 1


@pytest.mark.usefixtures("collector")
def test_overlapping_builds_resume_the_collector_only_when_the_last_ends() -> None:
    gc.enable()

    first = collector_paused()
    second = collector_paused()
    first.__enter__()
    second.__enter__()
    assert not gc.isenabled()
    first.__exit__(None, None, None)
    assert not gc.isenabled()  # the second build is still running
    second.__exit__(None, None, None)

    assert gc.isenabled()


@pytest.mark.usefixtures("collector")
def test_a_failed_build_resumes_the_collector_too() -> None:
    gc.enable()

    with pytest.raises(RuntimeError), collector_paused():
        raise RuntimeError("a handler cannot be built")

    assert gc.isenabled()
