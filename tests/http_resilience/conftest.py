"""http_resilience's async tests run on asyncio and on trio (anyio's plugin).

A test (or module, with ``pytestmark``) asyncio-only by nature is marked
``@pytest.mark.asyncio_only("reason")``: it runs on asyncio alone, its trio run
deselected, and the reason says why.
"""

from __future__ import annotations

import pytest

__all__ = ["anyio_backend"]

_MARK = "asyncio_only"


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """Every async test here runs on asyncio and on trio, unless asyncio-only."""
    backend: str = request.param
    return backend


def pytest_collection_modifyitems(
    config: pytest.Config, items: list[pytest.Item]
) -> None:
    """Deselect the trio runs of the tests marked ``asyncio_only``."""
    kept: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    for item in items:
        mark = item.get_closest_marker(_MARK)
        callspec = getattr(item, "callspec", None)
        backend = None if callspec is None else callspec.params.get("anyio_backend")
        if mark is not None and not mark.args:
            raise pytest.UsageError(f"{item.nodeid}: asyncio_only needs a reason")
        (dropped if mark is not None and backend == "trio" else kept).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
